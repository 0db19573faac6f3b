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

func TestAFailedRenderRecordsTheRevisionItTried(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	good := h.tick(t, key, queue.WakeTimer)
	ready(t, good)
	broken := pushed(t, w, map[string]string{"deploy/a.yaml": "kind: [\n"})
	got := h.tick(t, key, queue.WakeTimer)
	if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady); cond == nil || cond.Reason != plumbv1.ReasonReadFailed {
		t.Fatalf("Ready = %+v, want ReadFailed", cond)
	}
	if !strings.HasSuffix(got.Status.LastAttemptedRevision, broken) {
		t.Errorf("lastAttemptedRevision = %s, want the failing commit %s", got.Status.LastAttemptedRevision, broken)
	}
	if got.Status.LastAppliedRevision != good.Status.LastAppliedRevision {
		t.Errorf("lastAppliedRevision = %s, want the last good %s", got.Status.LastAppliedRevision, good.Status.LastAppliedRevision)
	}
}

func TestTheTickThatHealsDriftSaysNoDriftIsLeft(t *testing.T) {
	ctx := context.Background()
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  color: blue\n"})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	first := h.tick(t, key, queue.WakeTimer)
	ready(t, first)
	if first.Status.Drift == nil || first.Status.Drift.Count != 0 {
		t.Errorf("an App without drift: status.drift = %+v, want count 0", first.Status.Drift)
	}
	c := admin(t)
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "a"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "red"
	if err := c.Update(ctx, cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, cm)
	healed := h.tick(t, key, queue.WakeEvent)
	cond := apimeta.FindStatusCondition(healed.Status.Conditions, plumbv1.ConditionDrifted)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "DriftHealed" {
		t.Fatalf("Drifted = %+v, want False DriftHealed", cond)
	}
	if d := healed.Status.Drift; d == nil || d.Count != 0 || len(d.Objects) != 0 || d.LastDetectedTime == nil {
		t.Errorf("status.drift after the heal = %+v, want count 0, no objects, and when drift was last seen", d)
	}
}

// A Git source written as git (url, ref and secretRef nested) is read as
// the flat spelling is: with its credentials (the package's Git server
// refuses anonymous reads), at its ref, and a push is applied.
func TestAGitSourceWrittenAsGitIsReadWithItsCredentials(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, func(a *plumbv1.App) {
		src := a.Spec.Source
		a.Spec.Source = plumbv1.Source{Path: src.Path, Git: &plumbv1.GitSource{URL: src.URL, Ref: src.Ref, SecretRef: src.SecretRef}}
	})
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	first := h.tick(t, key, queue.WakeTimer)
	ready(t, first)
	if !strings.HasPrefix(first.Status.LastAppliedRevision, "main@sha1:") {
		t.Errorf("applied %q, want main@sha1:<commit>", first.Status.LastAppliedRevision)
	}
	next := pushed(t, w, map[string]string{"deploy/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if !strings.HasSuffix(got.Status.LastAppliedRevision, next) {
		t.Errorf("applied %q, want the pushed commit %s", got.Status.LastAppliedRevision, next)
	}
	if err := admin(t).Get(context.Background(), client.ObjectKey{Namespace: app.Namespace, Name: "b"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the pushed ConfigMap b: %v", err)
	}
}
