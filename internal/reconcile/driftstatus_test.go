package reconcile

import (
	"context"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

func TestAnObjectDeletedUnderTheAlertPolicyCountsAsDrift(t *testing.T) {
	ctx := context.Background()
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	if err := admin(t).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		got, _ := h.r.Observer.Get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, app.Namespace, "a")
		return got == nil
	})
	got := h.tick(t, key, queue.WakeEvent)
	if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionDrifted); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Drifted = %+v, want True", cond)
	}
	d := got.Status.Drift
	if d == nil || d.Count != 1 || len(d.Objects) != 1 || !slices.Contains(d.Objects[0].Fields, "(deleted)") {
		t.Errorf("status.drift = %+v, want the deleted object counted", d)
	}
}

func TestAHealThatFailsIsNotReportedAsHealed(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  color: blue\n"})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "deployer" })
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "deployer", allVerbs...)
	h := newHarnessAs(t, restrictedController(t), Policy{})
	ready(t, h.tick(t, key, queue.WakeTimer))

	// The App loses the right to put the object back (once the authorizer
	// has seen the RoleBinding go), then someone edits it.
	if err := c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "deployer"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + app.Namespace + ":deployer", Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: app.Namespace, Verb: "patch", Resource: "configmaps", Name: "a"}}}
		return c.Create(ctx, review) == nil && !review.Status.Allowed
	})
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "a"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "red"
	if err := c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, cm)
	got := h.tick(t, key, queue.WakeEvent)
	if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady); cond == nil || cond.Reason != plumbv1.ReasonApplyFailed {
		t.Fatalf("Ready = %+v, want ApplyFailed (the heal is forbidden)", cond)
	}
	cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionDrifted)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "DriftDetected" {
		t.Errorf("Drifted = %+v after a heal that failed, want True DriftDetected", cond)
	}
	if d := got.Status.Drift; d == nil || d.Count != 1 {
		t.Errorf("status.drift = %+v after a heal that failed, want count 1", d)
	}
}
