package testenv

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// startForTest starts a cluster that stops with the test and prints its
// components' logs when the test failed.
func startForTest(t *testing.T, mode Mode) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), Options{Mode: mode})
	if err != nil {
		t.Fatalf("Start(%s): %v", mode, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var logs strings.Builder
			c.WriteLogs(&logs, 100)
			t.Log(logs.String())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func TestFindBinariesNamesTheBuildCommandWhenTheCacheIsEmpty(t *testing.T) {
	empty := t.TempDir()
	for _, mode := range []Mode{ModeAPI, ModeFull} {
		t.Run(string(mode), func(t *testing.T) {
			_, err := Start(context.Background(), Options{Mode: mode, CacheRoot: empty})
			if !errors.Is(err, ErrBinariesMissing) {
				t.Fatalf("Start with an empty cache: got error %v, want ErrBinariesMissing", err)
			}
			wantCommand := "`" + CacheEnv + "=" + empty + " make controlplane`"
			if !strings.Contains(err.Error(), wantCommand) {
				t.Errorf("error %q does not name the build command %s", err, wantCommand)
			}
			for _, name := range []string{"etcd", "kube-apiserver"} {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name the missing %s", err, name)
				}
			}
			if mode == ModeFull && !strings.Contains(err.Error(), "kwok") {
				t.Errorf("error %q does not name the missing kwok", err)
			}
		})
	}
}

func TestAPIModeServesThePinnedVersionToClientsAndKubectl(t *testing.T) {
	c := startForTest(t, ModeAPI)
	versions, err := PinnedVersions()
	if err != nil {
		t.Fatal(err)
	}
	clientset := kubernetes.NewForConfigOrDie(c.Config)
	info, err := clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("ServerVersion: %v", err)
	}
	if info.GitVersion != versions.Kubernetes {
		t.Errorf("server gitVersion = %q, want %q", info.GitVersion, versions.Kubernetes)
	}
	out, err := exec.Command(c.Binaries.Path("kubectl"), "--kubeconfig", c.KubeconfigPath,
		"get", "namespace", "default", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl with the cluster's kubeconfig: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "namespace/default" {
		t.Errorf("kubectl get namespace default = %q, want namespace/default", got)
	}
}

func TestSeveralClustersRunAtOnceAndStopCleanly(t *testing.T) {
	const n = 2
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { clusters[i], errs[i] = Start(context.Background(), Options{Mode: ModeAPI}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("cluster %d: %v", i, err)
		}
	}
	// Each cluster is its own: a namespace created in one is absent in the other.
	ctx := context.Background()
	first := kubernetes.NewForConfigOrDie(clusters[0].Config)
	second := kubernetes.NewForConfigOrDie(clusters[1].Config)
	if clusters[0].Config.Host == clusters[1].Config.Host {
		t.Fatalf("both clusters serve on %s", clusters[0].Config.Host)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-first"}}
	if _, err := first.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a namespace in the first cluster: %v", err)
	}
	if _, err := second.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("namespace %s created in the first cluster is visible in the second", ns.Name)
	}
	// Each cluster finds its own etcd and kube-apiserver, not the other's.
	seen := map[int]bool{}
	for i, c := range clusters {
		pids, err := c.PIDs()
		if err != nil {
			t.Fatalf("cluster %d: PIDs: %v", i, err)
		}
		for _, name := range []string{"etcd", "kube-apiserver"} {
			if pids[name] == 0 || seen[pids[name]] {
				t.Errorf("cluster %d: %s PID %d (all: %v), want one of its own", i, name, pids[name], pids)
			}
			seen[pids[name]] = true
		}
	}
	for i, c := range clusters {
		dir := c.Dir
		clientset := kubernetes.NewForConfigOrDie(c.Config)
		if err := c.Stop(); err != nil {
			t.Errorf("stopping cluster %d: %v", i, err)
		}
		// Every process names the cluster's folder on its command line.
		if out, err := exec.Command("pgrep", "-a", "-f", dir).CombinedOutput(); err == nil {
			t.Errorf("cluster %d: processes still run after Stop:\n%s", i, out)
		}
		if _, err := clientset.Discovery().ServerVersion(); err == nil {
			t.Errorf("cluster %d still answers after Stop", i)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping cluster %d a second time: %v", i, err)
		}
	}
}

func TestFullModeRollsOutADeployment(t *testing.T) {
	c := startForTest(t, ModeFull)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clientset := kubernetes.NewForConfigOrDie(c.Config)
	labels := map[string]string{"app": "web"}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
			},
		},
	}
	if _, err := clientset.AppsV1().Deployments("default").Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	var last *appsv1.Deployment
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := clientset.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		for _, cond := range got.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
				return got.Status.AvailableReplicas == 2, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("deployment did not become Available with 2 replicas: %v; last status: %+v", err, last.Status)
	}
	pods, err := clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName {
			running++
		}
	}
	if running != 2 {
		t.Errorf("%d pods Running on %s, want 2", running, nodeName)
	}
}

func TestAddUserHasOnlyWhatRBACGrants(t *testing.T) {
	c := startForTest(t, ModeAPI)
	kubeconfig, cfg, err := c.AddUser("restricted", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets("default").List(context.Background(), metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("listing Secrets as a user without RBAC: %v, want forbidden", err)
	}
	out, err := exec.Command(c.Binaries.Path("kubectl"), "--kubeconfig", kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "restricted" {
		t.Errorf("kubectl auth whoami with the user's kubeconfig = %q, %v", out, err)
	}
}

func TestTheAPIServerCanBeStoppedAndStartedAgain(t *testing.T) {
	c := startForTest(t, ModeAPI)
	clientset := kubernetes.NewForConfigOrDie(c.Config)
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.Discovery().ServerVersion(); err == nil {
		t.Fatal("the API server answers while stopped")
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the same client could not reach the restarted API server: %v", err)
	}
}
