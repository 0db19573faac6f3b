package reconcile

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// updateApp changes an App and waits until the harness's cache has it (h
// nil: a harness made after will list it).
func updateApp(t *testing.T, h *harness, key types.NamespacedName, mutate func(*plumbv1.App)) {
	t.Helper()
	c := admin(t)
	a := &plumbv1.App{}
	if err := c.Get(context.Background(), key, a); err != nil {
		t.Fatal(err)
	}
	mutate(a)
	if err := c.Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		return
	}
	eventually(t, func() bool {
		cached := &plumbv1.App{}
		return h.r.Client.Get(context.Background(), key, cached) == nil && cached.Generation == a.Generation
	})
}

func TestAnAppWaitsForTheAppsItDependsOnAndRefusesACycle(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repoA := newRepo(t, map[string]string{"deploy/a.yaml": configMapYAML("from-a")})
	_, repoB := newRepo(t, map[string]string{"deploy/b.yaml": configMapYAML("from-b")})
	a := client.ObjectKeyFromObject(newApp(t, repoA, nil))
	b := app(t, c, a.Namespace, "b", repoB)
	updateApp(t, nil, b, func(app *plumbv1.App) {
		app.Spec.DependsOn = []plumbv1.AppReference{{Name: "missing"}, {Name: a.Name, Namespace: a.Namespace}}
	})
	h := newHarness(t)

	t.Run("a dependency that does not exist, and one that has not ticked: nothing applied", func(t *testing.T) {
		h.counter.Reset()
		app := h.tick(t, b, queue.TriggerTimer)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyNotReady,
			"App "+a.Namespace+"/missing does not exist", "App "+a.String()+" has not ticked yet")
		wantCondition(t, app, plumbv1.ConditionReconciling, metav1.ConditionTrue, plumbv1.ReasonDependencyNotReady)
		wantCondition(t, app, plumbv1.ConditionStalled, metav1.ConditionFalse, plumbv1.ReasonDependencyNotReady)
		if app.Status.Inventory != nil || app.Status.LastAttemptedRevision != "" {
			t.Errorf("B read or applied: inventory %+v, revision %q", app.Status.Inventory, app.Status.LastAttemptedRevision)
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: "from-b"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("B's ConfigMap: %v, want not found", err)
		}
		if got := h.counter.Matching("configmaps"); len(got) != 0 {
			t.Errorf("B asked about its objects while waiting: %q", got)
		}
	})

	t.Run("once its dependencies are Ready at their revisions, it applies", func(t *testing.T) {
		ready(t, h.tick(t, a, queue.TriggerTimer))
		updateApp(t, h, b, func(app *plumbv1.App) { app.Spec.DependsOn = app.Spec.DependsOn[1:] })
		ready(t, h.tick(t, b, queue.TriggerTimer))
		if err := c.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: "from-b"}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("B's ConfigMap: %v", err)
		}
	})

	t.Run("a cycle is refused, naming it", func(t *testing.T) {
		updateApp(t, h, a, func(app *plumbv1.App) { app.Spec.DependsOn = []plumbv1.AppReference{{Name: b.Name}} })
		_, err := h.r.Tick(ctx, a, queue.TriggerTimer)
		if !queue.IsTerminal(err) {
			t.Errorf("tick error %v, want a terminal one (no retry of the same spec)", err)
		}
		app := getApp(t, a)
		cycle := a.String() + " → " + b.String() + " → " + a.String()
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyCycle, cycle)
		wantCondition(t, app, plumbv1.ConditionStalled, metav1.ConditionTrue, plumbv1.ReasonDependencyCycle)
		wantCondition(t, h.tick(t, b, queue.TriggerTimer), plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyCycle,
			b.String()+" → "+a.String()+" → "+b.String())
	})

	t.Run("with cross-namespace references forbidden, a dependency in another namespace is refused", func(t *testing.T) {
		h.r.Policy.NoCrossNamespace = true
		defer func() { h.r.Policy.NoCrossNamespace = false }()
		updateApp(t, h, b, func(app *plumbv1.App) {
			app.Spec.DependsOn = []plumbv1.AppReference{{Name: "platform", Namespace: "kube-system"}}
		})
		_, err := h.r.Tick(ctx, b, queue.TriggerTimer)
		if !queue.IsTerminal(err) {
			t.Errorf("tick error %v, want a terminal one", err)
		}
		wantCondition(t, getApp(t, b), plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyNotReady,
			"kube-system/platform in another namespace", "--no-cross-namespace")
	})
}

// getApp reads an App from the API server.
func getApp(t *testing.T, key types.NamespacedName) *plumbv1.App {
	t.Helper()
	a := &plumbv1.App{}
	if err := admin(t).Get(context.Background(), key, a); err != nil {
		t.Fatal(err)
	}
	return a
}
