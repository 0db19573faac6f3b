package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// driftedCondition waits until the App's Drifted condition has status and reason.
func driftedCondition(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	eventually(t, 60*time.Second, "Drifted="+string(status)+" "+reason, func() (bool, string) {
		cond = findCondition(getApp(t, ns, name), plumbv1.ConditionDrifted)
		return cond.Status == status && cond.Reason == reason, cond.Reason + ": " + cond.Message
	})
	return cond
}

func TestTheAlertPolicyLeavesDriftInPlaceAndReportsWhoChangedWhat(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "alert", url, func(a *plumbv1.App) { a.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	readyAt(t, ns, "alert", first)

	cm, _ := getConfigMap(t, ns, "settings")
	cm.Data["color"] = "hand-made"
	if err := k8s.Update(context.Background(), cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	cond := driftedCondition(t, ns, "alert", metav1.ConditionTrue, "DriftDetected")
	for _, want := range []string{"ConfigMap/" + ns + "/settings", ".data.color", `"blue" → "hand-made"`, "kubectl-edit"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Drifted message %q lacks %q", cond.Message, want)
		}
	}
	app := getApp(t, ns, "alert")
	if app.Status.Drift == nil || app.Status.Drift.Count != 1 || len(app.Status.Drift.Objects) != 1 ||
		!strings.Contains(strings.Join(app.Status.Drift.Objects[0].Managers, ","), "kubectl-edit") {
		t.Errorf("drift summary = %+v", app.Status.Drift)
	}
	syncAndWait(t, ns, "alert") // another tick: still left alone, still one Event
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "hand-made" {
		t.Errorf("the alert policy healed the drift: color %q", cm.Data["color"])
	}
	if got := appEvents(t, ns, "alert")["DriftDetected"]; len(got) != 1 || got[0].Count != 1 {
		t.Errorf("DriftDetected Events: %+v, want one", got)
	}
}

func TestAControllerFightingOverAFieldIsReportedAsAConflict(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	createApp(t, ns, "fight", url, nil)
	readyAt(t, ns, "fight", first)

	// An autoscaler-like controller that sets replicas back to 5 whenever
	// they change, driven by a watch as a real controller is.
	ctx, stop := context.WithCancel(context.Background())
	watcher, err := kubernetes.NewForConfigOrDie(cluster.Config).AppsV1().Deployments(ns).Watch(ctx,
		metav1.ListOptions{FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for event := range watcher.ResultChan() {
			d, ok := event.Object.(*appsv1.Deployment)
			if !ok || (d.Spec.Replicas != nil && *d.Spec.Replicas == 5) {
				continue
			}
			five := int32(5)
			d.Spec.Replicas = &five
			_ = k8s.Update(ctx, d, client.FieldOwner("autoscaler")) // a conflict just waits for the next event
		}
	})
	cond := driftedCondition(t, ns, "fight", metav1.ConditionTrue, "DriftConflict")
	stop()
	watcher.Stop()
	wg.Wait()
	if !strings.Contains(cond.Message, "autoscaler") || !strings.Contains(cond.Message, ".spec.replicas") {
		t.Errorf("conflict message %q does not name the other manager and the field", cond.Message)
	}
	eventually(t, 30*time.Second, "one DriftConflict Event", func() (bool, string) {
		got := appEvents(t, ns, "fight")["DriftConflict"]
		return len(got) == 1, fmt.Sprintf("%d DriftConflict Events", len(got))
	})
	ready := notReady(t, ns, "fight", "DriftConflict")
	if msg := findCondition(ready, plumbv1.ConditionReady).Message; !strings.Contains(msg, ".spec.replicas") || !strings.Contains(msg, "autoscaler") {
		t.Errorf("Ready message %q does not name the field and the manager left alone", msg)
	}

	t.Run("another field changed by someone else is still healed", func(t *testing.T) {
		d := &appsv1.Deployment{}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
				return err
			}
			d.Spec.Template.Spec.Containers[0].Image = "evil:2"
			return k8s.Update(context.Background(), d, client.FieldOwner("kubectl-set"))
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the image to be healed", func() (bool, string) {
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
				return false, err.Error()
			}
			return d.Spec.Template.Spec.Containers[0].Image == "nginx:1.27", "image " + d.Spec.Template.Spec.Containers[0].Image
		})
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 5 {
			t.Errorf("healing the image took replicas back from the autoscaler: %v", d.Spec.Replicas)
		}
	})
}

func TestIgnoredFieldsAreLeftToOthers(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	createApp(t, ns, "scaled", url, func(a *plumbv1.App) {
		a.Spec.Ignore = []plumbv1.IgnoreRule{{Group: "apps", Kind: "Deployment", Paths: []string{"/spec/replicas"}}}
	})
	readyAt(t, ns, "scaled", first)
	d := &appsv1.Deployment{}
	four := int32(4)
	// The deployment controller writes status meanwhile: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
			return err
		}
		d.Spec.Replicas = &four
		return k8s.Update(context.Background(), d, client.FieldOwner("autoscaler"))
	})
	if err != nil {
		t.Fatal(err)
	}
	syncAndWait(t, ns, "scaled")
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 4 {
		t.Errorf("replicas = %d, want the autoscaler's 4", *d.Spec.Replicas)
	}
	if cond := findCondition(getApp(t, ns, "scaled"), plumbv1.ConditionDrifted); cond.Status != metav1.ConditionFalse {
		t.Errorf("Drifted = %s %s: %s", cond.Status, cond.Reason, cond.Message)
	}
}

func TestAnEnvVarAddedByHandIsRemovedAgain(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/web.yaml": strings.Replace(testenv.Fixture(t, "web-deployment.yaml"),
		"        image: nginx:1.27\n", "        image: nginx:1.27\n        env:\n        - {name: MODE, value: production}\n", 1)})
	createApp(t, ns, "env", url, nil) // interval 10m: only the informer brings the tick
	readyAt(t, ns, "env", first)
	out, err := exec.Command(cluster.Binaries.Path("kubectl"), "--kubeconfig", cluster.KubeconfigPath, "-n", ns,
		"set", "env", "deployment/web", "DEBUG=1").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl set env: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "DEBUG to be removed", func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
			return false, err.Error()
		}
		env := d.Spec.Template.Spec.Containers[0].Env
		return len(env) == 1 && env[0].Name == "MODE", fmt.Sprintf("env %v", env)
	})
	// Events are recorded asynchronously: the heal can be seen before its Event.
	eventually(t, 30*time.Second, "one DriftDetected Event naming the env var and kubectl-set", func() (bool, string) {
		got := appEvents(t, ns, "env")["DriftDetected"]
		return len(got) == 1 && strings.Contains(got[0].Message, `env[name="DEBUG"]`) && strings.Contains(got[0].Message, "kubectl-set"),
			fmt.Sprintf("DriftDetected Events: %+v", got)
	})
}
