package reconcile

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

func TestTheAlertPolicyLeavesAHandEditAloneAcrossACommitAndARestart(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	cm := func(name, color string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  color: " + color + "\n"
	}
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": cm("a", "blue"), "deploy/b.yaml": cm("b", "blue")})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))

	edited := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "a"}, edited); err != nil {
		t.Fatal(err)
	}
	edited.Data["color"] = "hand-made"
	if err := c.Update(ctx, edited, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, edited)
	drifted := func(t *testing.T, app *plumbv1.App) {
		t.Helper()
		cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionDrifted)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "ConfigMap/"+app.Namespace+"/a") ||
			!strings.Contains(cond.Message, "kubectl-edit") {
			t.Errorf("Drifted = %+v, want True naming ConfigMap a and kubectl-edit", cond)
		}
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(edited), got); err != nil {
			t.Fatal(err)
		}
		if got.Data["color"] != "hand-made" {
			t.Errorf("the alert policy put the hand edit back: color %q", got.Data["color"])
		}
	}
	drifted(t, h.tick(t, key, queue.WakeEvent))

	// Git moves on (another object changes), then the controller restarts.
	next := pushed(t, w, map[string]string{"deploy/b.yaml": cm("b", "green")})
	ready(t, h.tick(t, key, queue.WakeTimer))
	restarted := newHarness(t)
	after := restarted.tick(t, key, queue.WakeTimer)
	drifted(t, after)
	b := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "b"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Data["color"] != "green" || !strings.HasSuffix(after.Status.LastAttemptedRevision, next) {
		t.Errorf("Git's change was not applied: b is %q at %s", b.Data["color"], after.Status.LastAttemptedRevision)
	}
	var detected bool
	for _, e := range restarted.recorded() {
		detected = detected || (strings.Contains(e, "DriftDetected") && strings.Contains(e, "kubectl-edit"))
	}
	if !detected {
		t.Error("the restarted controller recorded no DriftDetected Event naming kubectl-edit")
	}
}
