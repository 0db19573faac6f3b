package reconcile

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
)

func TestAFieldOneManagerKeepsChangingIsLeftToItAndOnlyThatField(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	change := func(manager string, mutate func(*appsv1.Deployment)) {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		mutate(d)
		if err := c.Update(ctx, d, client.FieldOwner(manager)); err != nil {
			t.Fatal(err)
		}
		waitCached(t, h, d)
	}
	scale := func(d *appsv1.Deployment) { five := int32(5); d.Spec.Replicas = &five }
	for range maxHeals {
		change("autoscaler", scale)
		ready(t, h.tick(t, key, queue.WakeEvent)) // healed
	}
	change("autoscaler", scale)
	got := h.tick(t, key, queue.WakeEvent)
	cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "DriftConflict" ||
		!strings.Contains(cond.Message, ".spec.replicas left to autoscaler") {
		t.Fatalf("Ready = %+v, want False DriftConflict naming .spec.replicas and autoscaler", cond)
	}
	var conflictEvents int
	for _, e := range h.recorded() {
		if strings.Contains(e, "DriftConflict") {
			conflictEvents++
		}
	}
	if conflictEvents != 1 {
		t.Errorf("%d DriftConflict Events, want 1", conflictEvents)
	}

	// Someone else changes the image: that is still healed, and the
	// replicas stay the autoscaler's.
	change("kubectl-set", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "evil:2" })
	h.tick(t, key, queue.WakeEvent)
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "web"}, d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.Containers[0].Image != "nginx:1.27" || d.Spec.Replicas == nil || *d.Spec.Replicas != 5 {
		t.Errorf("image %s, replicas %v; want the image healed and the replicas left at 5", d.Spec.Template.Spec.Containers[0].Image, d.Spec.Replicas)
	}

	replicasAndImage := func() (int32, string) {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image
	}
	conflictAgain := func() {
		t.Helper()
		for range maxHeals + 1 {
			change("autoscaler", scale)
			h.tick(t, key, queue.WakeEvent)
		}
		if replicas, _ := replicasAndImage(); replicas != 5 {
			t.Fatalf("replicas %d: the field was not left to the autoscaler", replicas)
		}
	}

	// Git changes the object: the conflict ends, Git's replicas are applied.
	pushed(t, w, map[string]string{"deploy/web.yaml": strings.Replace(testenv.Fixture(t, "web-deployment.yaml"), "nginx:1.27", "nginx:1.28", 1)})
	ready(t, h.tick(t, key, queue.WakeTimer))
	if replicas, image := replicasAndImage(); replicas != 2 || image != "nginx:1.28" {
		t.Errorf("after Git changed the object: replicas %d, image %s; want 2 and nginx:1.28", replicas, image)
	}

	// Another manager takes the field from the autoscaler: the conflict
	// ends, and that change is healed.
	conflictAgain()
	change("kubectl-scale", func(d *appsv1.Deployment) { seven := int32(7); d.Spec.Replicas = &seven })
	ready(t, h.tick(t, key, queue.WakeEvent))
	if replicas, _ := replicasAndImage(); replicas != 2 {
		t.Errorf("another manager's change of the left field: replicas %d, want it healed to 2", replicas)
	}
}
