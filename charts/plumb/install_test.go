package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/shard"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/webhook"
)

// helmConfig is the Helm SDK's configuration for the release's namespace
// (its releases are stored as Secrets there, as helm's CLI does).
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	kubeconfig, namespace := cluster.KubeconfigPath, releaseNamespace
	getter := &genericclioptions.ConfigFlags{KubeConfig: &kubeconfig, Namespace: &namespace}
	cfg := &action.Configuration{}
	if err := cfg.Init(getter, releaseNamespace, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newKubeClient(t *testing.T) client.Client {
	t.Helper()
	return cluster.Client(t)
}

// TestInstallRunUpgradeAndUninstall installs the chart with the Helm SDK,
// runs plumb outside the cluster exactly as the chart's Deployment would
// (its ServiceAccount's token, its flags, its webhook secret), upgrades it
// to another RBAC mode, and uninstalls it.
func TestInstallRunUpgradeAndUninstall(t *testing.T) {
	ctx := context.Background()
	tc := newClients(t)
	k8s := newKubeClient(t)
	tc.ensureNamespace(t, releaseNamespace)
	tc.ensureNamespace(t, "hello")
	repoURL := pushExample(t)
	plumbBin := buildPlumb(t)
	helm := helmConfig(t)

	install := action.NewInstall(helm)
	install.ReleaseName, install.Namespace = "plumb", releaseNamespace
	if _, err := install.Run(loadChart(t), values(t, "webhook: {providers: [github, gitlab]}")); err != nil {
		t.Fatalf("helm install: %v", err)
	}

	t.Run("mode cluster: the chart's rights reconcile an App to Ready", func(t *testing.T) {
		plumb := runAsTheChart(t, plumbBin)
		defer plumb.stop(t)
		createApp(t, k8s, "hello", "web", repoURL, "web")
		waitForReady(t, k8s, "hello", "web", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })

		// A kind outside the granted rules is denied: its watch, which
		// Observe needs before anything is applied, is forbidden.
		createApp(t, k8s, "hello", "outside", repoURL, "outside")
		cond := waitForReady(t, k8s, "hello", "outside", func(c *metav1.Condition) bool { return c.Reason == plumbv1.ReasonObserveFailed })
		names(t, cond, "forbidden", "clusterroles", "system:serviceaccount:plumb-system:plumb")

		// The webhook secret the chart made (and would mount) verifies a
		// signed push; a push signed with another secret is refused.
		secret := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "plumb-webhook"}, secret); err != nil {
			t.Fatal(err)
		}
		if len(secret.Data["github"]) < 32 || len(secret.Data["gitlab"]) < 32 {
			t.Fatalf("the chart's webhook Secret holds %d and %d bytes, want random secrets of 32", len(secret.Data["github"]), len(secret.Data["gitlab"]))
		}
		if code, answer := pushHook(t, plumb.webhookAddr, repoURL, secret.Data["github"]); code != http.StatusAccepted || !strings.Contains(answer, "matched 2 apps") {
			t.Errorf("a push signed with the chart's secret: %d %q, want 202 matching both Apps of the repository", code, answer)
		}
		if code, _ := pushHook(t, plumb.webhookAddr, repoURL, []byte("not-the-secret")); code != http.StatusUnauthorized {
			t.Errorf("a push signed with another secret: %d, want 401", code)
		}
		// Deleted while plumb has the rights that applied their objects.
		deleteApps(t, k8s, "hello", "web", "outside")
	})

	t.Run("mode cluster with a kind granted read-only: the write is refused at Apply", func(t *testing.T) {
		helmUpgrade(t, helm, values(t, `webhook: {providers: [github, gitlab]}
rbac: {extraRules: [{apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [get, list, watch]}]}`))
		plumb := runAsTheChart(t, plumbBin)
		defer plumb.stop(t)
		createApp(t, k8s, "hello", "read-only", repoURL, "outside")
		cond := waitForReady(t, k8s, "hello", "read-only", func(c *metav1.Condition) bool { return c.Reason == plumbv1.ReasonApplyFailed })
		names(t, cond, "forbidden", `cannot patch resource "clusterroles"`, "system:serviceaccount:plumb-system:plumb")
		deleteApps(t, k8s, "hello", "read-only")
	})

	t.Run("upgrade to mode none: plumb writes only as the Apps' ServiceAccounts", func(t *testing.T) {
		before := &corev1.Secret{}
		_ = k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "plumb-webhook"}, before)
		helmUpgrade(t, helm, values(t, "webhook: {providers: [github, gitlab]}\nrbac: {mode: none}\ncontroller: {defaultServiceAccount: deployer, workers: 2}"))
		after := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "plumb-webhook"}, after); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before.Data["github"], after.Data["github"]) {
			t.Error("the upgrade changed the random webhook secret: every Git host's webhook would break")
		}
		// The ServiceAccount that Apps of namespace hello act as, which may
		// write ConfigMaps there and nothing else.
		deployer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "hello", Name: "deployer"}}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "hello", Name: "deployer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "hello", Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "hello", Name: "deployer"}}}
		for _, obj := range []client.Object{deployer, role, binding} {
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		plumb := runAsTheChart(t, plumbBin)
		defer plumb.stop(t)
		if a := plumb.args; !slices.Contains(a, "--default-service-account=deployer") || !slices.Contains(a, "--workers=2") {
			t.Errorf("after the upgrade plumb runs with %v, want the changed values", a)
		}
		createApp(t, k8s, "hello", "tenant-ok", repoURL, "tenant-ok")
		waitForReady(t, k8s, "hello", "tenant-ok", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })

		createApp(t, k8s, "hello", "tenant", repoURL, "tenant")
		cond := waitForReady(t, k8s, "hello", "tenant", func(c *metav1.Condition) bool { return c.Reason == plumbv1.ReasonApplyFailed })
		names(t, cond, "forbidden", "services", "system:serviceaccount:hello:deployer")
		// Nothing of that commit was applied, not even what was allowed.
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "hello", Name: "tenant"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap hello/tenant: %v, want it never applied", err)
		}
		deleteApps(t, k8s, "hello", "tenant-ok", "tenant")
	})

	// With managed rules that leave Secrets out: the App's credentials
	// Secret is read with plumb's own rights.
	t.Run("upgrade to mode namespaces: Roles in the listed namespaces are all plumb needs", func(t *testing.T) {
		helmUpgrade(t, helm, values(t, `rbac: {mode: namespaces, namespaces: [hello],
  rules: [{apiGroups: [""], resources: [configmaps, services], verbs: [get, list, watch, create, patch, delete]}]}
controller: {noCrossNamespace: false}`))
		for _, kind := range []client.ObjectList{&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{}} {
			if err := k8s.List(ctx, kind, client.MatchingLabels{"app.kubernetes.io/instance": "plumb"}); err != nil {
				t.Fatal(err)
			}
			if n := apimeta.LenList(kind); n != 0 {
				t.Errorf("mode namespaces left %d %T of the release", n, kind)
			}
		}
		plumb := runAsTheChart(t, plumbBin)
		defer plumb.stop(t)
		createApp(t, k8s, "hello", "scoped", repoURL, "web")
		waitForReady(t, k8s, "hello", "scoped", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
		// An object in a namespace the install does not cover is out of scope.
		createApp(t, k8s, "hello", "elsewhere", repoURL, "elsewhere")
		cond := waitForReady(t, k8s, "hello", "elsewhere", func(c *metav1.Condition) bool { return c.Reason == plumbv1.ReasonObserveFailed })
		names(t, cond, "outside the namespaces the controller watches", "[hello]", `"other"`)
		app := &plumbv1.App{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "hello", Name: "elsewhere"}, app); err != nil {
			t.Fatal(err)
		}
		if reason := app.Status.Phases.Observe.Reason; reason != "OutOfScope" {
			t.Errorf("the Observe phase's reason = %q, want OutOfScope", reason)
		}
		deleteApps(t, k8s, "hello", "scoped", "elsewhere")
	})

	t.Run("upgrade to shards: 2: two pods spread the Apps over their Leases", func(t *testing.T) {
		helmUpgrade(t, helm, values(t, "webhook: {providers: [github, gitlab]}\nshards: 2"))
		deployment := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "plumb"}, deployment); err != nil {
			t.Fatal(err)
		}
		if r := deployment.Spec.Replicas; r == nil || *r != 2 {
			t.Fatalf("the Deployment runs %v replicas, want 2", r)
		}
		pods := []string{"plumb-6d9f-a", "plumb-6d9f-b"}
		for _, pod := range pods {
			p := runAsTheChart(t, plumbBin, "POD_NAME="+pod)
			defer p.stop(t)
		}
		apps := []string{"spread-1", "spread-2", "spread-3", "spread-4"}
		for _, name := range apps {
			createApp(t, k8s, "hello", name, repoURL, name)
		}
		placed := shard.Place(pods, shard.DefaultEpsilon)
		poll(t, "every App Ready at the pod the placement gives it", func() (bool, string) {
			wrong := []string{}
			for _, name := range apps {
				app := &plumbv1.App{}
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: "hello", Name: name}, app); err != nil {
					return false, err.Error()
				}
				if !apimeta.IsStatusConditionTrue(app.Status.Conditions, plumbv1.ConditionReady) || app.Status.Shard != placed[shard.SlotOf("hello", name)] {
					wrong = append(wrong, fmt.Sprintf("%s at %q", name, app.Status.Shard))
				}
			}
			return len(wrong) == 0, strings.Join(wrong, ", ")
		})
		leases := &coordinationv1.LeaseList{}
		if err := k8s.List(ctx, leases, client.InNamespace(releaseNamespace), client.HasLabels{shard.LabelGroup}); err != nil {
			t.Fatal(err)
		}
		var holders []string
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil {
				holders = append(holders, *l.Spec.HolderIdentity)
			}
		}
		slices.Sort(holders)
		if !slices.Equal(holders, pods) {
			t.Errorf("the shard Leases are held by %v, want one per pod %v", holders, pods)
		}
		deleteApps(t, k8s, "hello", apps...)
	})

	t.Run("uninstall leaves nothing behind but the CRDs", func(t *testing.T) {
		if _, err := action.NewUninstall(helm).Run("plumb"); err != nil {
			t.Fatalf("helm uninstall: %v", err)
		}
		left := tc.sweep(t, releaseNamespace, "app.kubernetes.io/instance=plumb")
		left = append(left, tc.sweepLabelled(t, "hello", "app.kubernetes.io/instance=plumb")...)
		if len(left) > 0 {
			t.Errorf("left behind after uninstall: %v", left)
		}
		for _, name := range []string{"apps.plumb.dev", "notifications.plumb.dev"} {
			if _, err := tc.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("the CRD %s: %v, want it kept (Helm never deletes CRDs)", name, err)
			}
		}
	})
}

// helmUpgrade upgrades the release to the chart with vals.
func helmUpgrade(t *testing.T, helm *action.Configuration, vals map[string]any) {
	t.Helper()
	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace = releaseNamespace
	if _, err := upgrade.Run("plumb", loadChart(t), vals); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
}

// names fails the test unless cond's message holds each of wants.
func names(t *testing.T, cond *metav1.Condition, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Ready=False %s %q does not name %q", cond.Reason, cond.Message, want)
		}
	}
}

// deleteApps deletes Apps and waits until plumb has finalized them (pruned
// their objects).
func deleteApps(t *testing.T, k8s client.Client, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		if err := k8s.Delete(ctx, &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, fmt.Sprintf("Apps %v finalized", names), func() (bool, string) {
		list := &plumbv1.AppList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, app := range list.Items {
			if slices.Contains(names, app.Name) {
				cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
				left = append(left, fmt.Sprintf("%s (%v)", app.Name, cond))
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// pushExample pushes the Apps' folders to a repository of the Git server:
// web/ (what the chart's rights allow), outside/ (a ClusterRole, which they
// do not), tenant-ok/ and tenant/ (for the ServiceAccount deployer).
func pushExample(t *testing.T) string {
	t.Helper()
	w, err := gitServer.NewWorkdir("chart-example")
	if err != nil {
		t.Fatal(err)
	}
	configMap := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: hello}\ndata: {greeting: hello}\n"
	}
	service := "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: hello}\nspec: {ports: [{port: 80}], selector: {app: web}}\n"
	files := map[string]string{
		"web/configmap.yaml":       configMap("web"),
		"web/service.yaml":         service,
		"outside/clusterrole.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: plumb-chart-test-outside}\nrules: []\n",
		"tenant-ok/configmap.yaml": configMap("tenant-ok"),
		"elsewhere/configmap.yaml": strings.ReplaceAll(configMap("elsewhere"), "namespace: hello", "namespace: other"),
		"tenant/configmap.yaml":    configMap("tenant"),
		"tenant/service.yaml":      strings.ReplaceAll(service, "name: web", "name: tenant"),
	}
	for i := 1; i <= 4; i++ {
		files[fmt.Sprintf("spread-%d/configmap.yaml", i)] = configMap(fmt.Sprintf("spread-%d", i))
	}
	if _, err := w.Commit("the example", files); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return gitServer.HTTPURL("chart-example")
}

// createApp creates an App of the example's folder path, with the Git
// server's credentials in a Secret it names.
func createApp(t *testing.T, k8s client.Client, ns, name, url, path string) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{URL: url, Ref: plumbv1.GitRef{Branch: "main"}, Path: path,
			SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}}}}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
}

// waitForReady waits until the App's Ready condition satisfies want.
func waitForReady(t *testing.T, k8s client.Client, ns, name string, want func(*metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	poll(t, "App "+name, func() (bool, string) {
		app := &plumbv1.App{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, app); err != nil {
			return false, err.Error()
		}
		cond = apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if cond == nil {
			return false, "no Ready condition"
		}
		return want(cond), fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return cond
}

func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %s", what, last)
	}
}

func buildPlumb(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plumb")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/plumb-dev/plumb/cmd/plumb").CombinedOutput(); err != nil {
		t.Fatalf("building plumb: %v\n%s", err, out)
	}
	return bin
}

// chartProcess is plumb running as the chart's Deployment would.
type chartProcess struct {
	cmd         *exec.Cmd
	args        []string
	webhookAddr string
	log         string
	exited      chan error
}

// runAsTheChart starts plumb with the installed Deployment's arguments,
// a token of its ServiceAccount from the TokenRequest API, and the files
// its volumes would hold; only addresses and folders are local ones.
func runAsTheChart(t *testing.T, plumbBin string, env ...string) *chartProcess {
	t.Helper()
	ctx := context.Background()
	tc, err := newTestClientsFor(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	k8s := newKubeClient(t)
	deployment := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "plumb"}, deployment); err != nil {
		t.Fatalf("the chart's Deployment: %v", err)
	}
	pod := deployment.Spec.Template.Spec
	token, err := tc.kube.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, pod.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of the chart's ServiceAccount %s: %v", pod.ServiceAccountName, err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"plumb": {Token: token.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"plumb": {Cluster: "local", AuthInfo: "plumb"}},
		CurrentContext: "plumb",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The files the pod's volumes would hold: the webhook secrets.
	var secretDir, secretName string
	for _, m := range pod.Containers[0].VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secretDir, secretName = m.MountPath, v.Secret.SecretName
			}
		}
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: secretName}, secret); err != nil {
		t.Fatalf("the webhook Secret %s that the Deployment mounts: %v", secretName, err)
	}
	for key, value := range secret.Data {
		if err := os.WriteFile(filepath.Join(dir, key), value, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	addrs := testenv.FreeAddrsForTest(t, 3)
	p := &chartProcess{args: pod.Containers[0].Args, webhookAddr: addrs[0], log: filepath.Join(dir, "plumb.log"), exited: make(chan error, 1)}
	local := map[string]string{
		"--metrics-addr": addrs[1], "--health-addr": addrs[2], "--webhook-addr": p.webhookAddr,
		"--git-cache-dir": filepath.Join(dir, "git"),
	}
	args := []string{"--kubeconfig", kubeconfig}
	for _, arg := range p.args {
		name, _, _ := strings.Cut(arg, "=")
		if v, ok := local[name]; ok {
			arg = name + "=" + v
		}
		if name == "--webhook-secret-file" {
			arg = strings.Replace(arg, secretDir, dir, 1)
		}
		args = append(args, arg)
	}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(plumbBin, args...)
	p.cmd.Env = append(os.Environ(), env...) // what the pod's env would set
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(p.log)
			t.Logf("plumb's log:\n%s", tail(string(data), 80))
		}
	})
	return p
}

func (p *chartProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Error("plumb did not stop within 60s of SIGTERM")
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pushHook posts a GitHub push of main to the repository at url, signed
// with secret, to the receiver at addr.
func pushHook(t *testing.T, addr, url string, secret []byte) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "after": strings.Repeat("1", 40),
		"repository": map[string]any{"clone_url": url, "html_url": url, "full_name": "chart/example"},
	})
	req, err := webhook.NewGitHubPush(context.Background(), "http://"+addr+"/hooks/github", secret, body, "chart-test")
	if err != nil {
		t.Fatal(err)
	}
	var code int
	var answer string
	// The receiver starts with plumb; wait until it listens.
	poll(t, "the webhook receiver", func() (bool, string) {
		req.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		code, answer = resp.StatusCode, string(data)
		return true, ""
	})
	return code, answer
}
