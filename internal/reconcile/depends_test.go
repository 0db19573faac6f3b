package reconcile

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

	t.Run("a dependency that does not exist, and one that has not ticked: nothing observed or applied", func(t *testing.T) {
		h.counter.Reset()
		app := h.tick(t, b, queue.WakeTimer)
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyNotReady,
			"App "+a.Namespace+"/missing does not exist", "App "+a.String()+" has not ticked yet")
		wantCondition(t, app, plumbv1.ConditionReconciling, metav1.ConditionTrue, plumbv1.ReasonDependencyNotReady)
		wantCondition(t, app, plumbv1.ConditionStalled, metav1.ConditionFalse, plumbv1.ReasonDependencyNotReady)
		// It read the revision it waits to apply, and applied nothing.
		if app.Status.Inventory != nil || app.Status.LastAttemptedRevision == "" || app.Status.LastAppliedRevision != "" {
			t.Errorf("inventory %+v, attempted %q, applied %q; want nothing applied, the revision read", app.Status.Inventory,
				app.Status.LastAttemptedRevision, app.Status.LastAppliedRevision)
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: "from-b"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("B's ConfigMap: %v, want not found", err)
		}
		if got := h.counter.Matching("configmaps"); len(got) != 0 {
			t.Errorf("B asked about its objects while waiting: %q", got)
		}
		// Its record says it waited, after a timed Read, and names no failure.
		if n := len(app.Status.RecentTicks); n == 0 {
			t.Error("the waiting tick left no record")
		} else if last := app.Status.RecentTicks[n-1]; last.Result != TickWaiting || last.FailedPhase != "" || last.ReadMillis == nil || last.ObserveMillis != nil {
			t.Errorf("the waiting tick's record = %+v, want %s, no failed phase, Read timed and nothing after it", last, TickWaiting)
		}
	})

	t.Run("once its dependencies are Ready at their revisions, it applies", func(t *testing.T) {
		ready(t, h.tick(t, a, queue.WakeTimer))
		updateApp(t, h, b, func(app *plumbv1.App) { app.Spec.DependsOn = app.Spec.DependsOn[1:] })
		ready(t, h.tick(t, b, queue.WakeTimer))
		if err := c.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: "from-b"}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("B's ConfigMap: %v", err)
		}
	})

	t.Run("a cycle is refused, naming it", func(t *testing.T) {
		updateApp(t, h, a, func(app *plumbv1.App) { app.Spec.DependsOn = []plumbv1.AppReference{{Name: b.Name}} })
		_, err := h.r.Tick(ctx, a, queue.WakeTimer)
		if !queue.IsTerminal(err) {
			t.Errorf("tick error %v, want a terminal one (no retry of the same spec)", err)
		}
		app := getApp(t, a)
		cycle := a.String() + " → " + b.String() + " → " + a.String()
		wantCondition(t, app, plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyCycle, cycle)
		wantCondition(t, app, plumbv1.ConditionStalled, metav1.ConditionTrue, plumbv1.ReasonDependencyCycle)
		// B applied its current revision before the cycle formed: a tick of
		// what it applied is not held, so it stays Ready.
		ready(t, h.tick(t, b, queue.WakeTimer))
	})

	t.Run("an App of another namespace learns a dependency's reason, not its message", func(t *testing.T) {
		other := client.ObjectKeyFromObject(newApp(t, repoB, func(app *plumbv1.App) {
			app.Spec.DependsOn = []plumbv1.AppReference{{Name: a.Name, Namespace: a.Namespace}}
		}))
		h := newHarness(t)
		ready := condition(t, h.tick(t, other, queue.WakeTimer), plumbv1.ConditionReady)
		if want := "App " + a.String() + " is not Ready (DependencyCycle)"; ready.Reason != plumbv1.ReasonDependencyNotReady || !strings.Contains(ready.Message, want) {
			t.Errorf("Ready %s: %s; want DependencyNotReady with %q", ready.Reason, ready.Message, want)
		}
		if strings.Contains(ready.Message, "→") {
			t.Errorf("the message %q quotes the other namespace's App", ready.Message)
		}
	})

	t.Run("with cross-namespace references forbidden, a dependency in another namespace is refused", func(t *testing.T) {
		h.r.Policy.NoCrossNamespace = true
		defer func() { h.r.Policy.NoCrossNamespace = false }()
		updateApp(t, h, b, func(app *plumbv1.App) {
			app.Spec.DependsOn = []plumbv1.AppReference{{Name: "platform", Namespace: "kube-system"}}
		})
		_, err := h.r.Tick(ctx, b, queue.WakeTimer)
		if !queue.IsTerminal(err) {
			t.Errorf("tick error %v, want a terminal one", err)
		}
		wantCondition(t, getApp(t, b), plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyNotAllowed,
			"kube-system/platform in another namespace", "--no-cross-namespace")
		wantCondition(t, getApp(t, b), plumbv1.ConditionStalled, metav1.ConditionTrue, plumbv1.ReasonDependencyNotAllowed)
	})

	t.Run("an App acting as a ServiceAccount depends on another namespace's App only if it may read it", func(t *testing.T) {
		tenant := client.ObjectKeyFromObject(newApp(t, repoB, func(app *plumbv1.App) {
			app.Spec.ServiceAccountName = "deployer"
			app.Spec.DependsOn = []plumbv1.AppReference{{Name: a.Name, Namespace: a.Namespace}}
		}))
		serviceAccount(t, tenant.Namespace, "deployer", allVerbs...)
		h := newHarness(t)
		eventually(t, func() bool { // the ServiceAccount, as the impersonation cache sees it
			_, err := h.r.Identities.For(ctx, tenant, "deployer")
			return err == nil
		})
		_, err := h.r.Tick(ctx, tenant, queue.WakeTimer)
		if err == nil || queue.IsTerminal(err) {
			t.Errorf("tick error %v, want one retried with backoff (RBAC may change)", err)
		}
		user := "system:serviceaccount:" + tenant.Namespace + ":deployer"
		wantCondition(t, getApp(t, tenant), plumbv1.ConditionReady, metav1.ConditionFalse, plumbv1.ReasonDependencyNotAllowed,
			`apps.plumb.dev "app" is forbidden: User "`+user+`" cannot get resource "apps"`)

		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: "read-apps-" + tenant.Namespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"plumb.dev"}, Resources: []string{"apps"}, Verbs: []string{"get"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenant.Namespace, Name: "deployer"}}}
		for _, obj := range []client.Object{role, binding} {
			if err := c.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		// The authorizer sees new RBAC within moments: ask until it does.
		var last metav1.Condition
		eventually(t, func() bool {
			last = condition(t, h.tick(t, tenant, queue.WakeTimer), plumbv1.ConditionReady)
			return last.Reason == plumbv1.ReasonDependencyNotReady
		})
		if want := "App " + a.String() + " is not Ready (DependencyCycle)"; !strings.Contains(last.Message, want) {
			t.Errorf("Ready message %q, want %q", last.Message, want)
		}
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
