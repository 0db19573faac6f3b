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

func TestAnAppDoesNotTakeAnObjectFromAnotherApp(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	shared := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: %s\ndata:\n  owner: %s\n"
	first := newApp(t, "unused", nil) // only for its namespace
	ns := first.Namespace
	_, repoA := newRepo(t, map[string]string{"deploy/cm.yaml": strings.ReplaceAll(strings.Replace(shared, "%s", ns, 1), "%s", "a")})
	_, repoB := newRepo(t, map[string]string{"deploy/cm.yaml": strings.ReplaceAll(strings.Replace(shared, "%s", ns, 1), "%s", "b"),
		"deploy/other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: only-b\n"})
	appA := app(t, c, ns, "a", repoA)
	appB := app(t, c, ns, "b", repoB)
	h := newHarness(t)
	ready(t, h.tick(t, appA, queue.WakeTimer))

	got := h.tick(t, appB, queue.WakeTimer)
	cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != plumbv1.ReasonApplyFailed ||
		got.Status.Phases.Apply.Reason != "Conflict" || !strings.Contains(cond.Message, "ConfigMap/"+ns+"/shared belongs to App "+ns+"/a") {
		t.Fatalf("App b: Ready=%+v, apply phase %+v; want ApplyFailed, Conflict naming App a", cond, got.Status.Phases.Apply)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["owner"] != "a" || cm.Labels[plumbv1.LabelAppName] != "a" {
		t.Errorf("App b changed App a's object: data %v, labels %v", cm.Data, cm.Labels)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "only-b"}, &corev1.ConfigMap{}); err == nil {
		t.Error("App b applied part of its objects despite the conflict")
	}

	t.Run("an annotation naming the other App lets it take the object over, and only it", func(t *testing.T) {
		patch := client.MergeFrom(cm.DeepCopy())
		cm.Annotations = map[string]string{plumbv1.AnnotationTakeover: ns + "/b"}
		if err := c.Patch(ctx, cm, patch, client.FieldOwner("kubectl-annotate")); err != nil {
			t.Fatal(err)
		}
		waitCached(t, h, cm)
		ready(t, h.tick(t, appB, queue.WakeTimer))
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["owner"] != "b" || cm.Labels[plumbv1.LabelAppName] != "b" {
			t.Errorf("after the takeover: data %v, labels %v; want App b's", cm.Data, cm.Labels)
		}
		waitCached(t, h, cm)
		got := h.tick(t, appA, queue.WakeTimer)
		if got.Status.Phases.Apply.Reason != "Conflict" || !strings.Contains(got.Status.Phases.Apply.LastError, "belongs to App "+ns+"/b") {
			t.Errorf("App a after the takeover: apply phase %+v, want a Conflict naming App b", got.Status.Phases.Apply)
		}
	})
}
