package reconcile

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/metrics"
	"github.com/plumb-dev/plumb/queue"
)

func TestTheTriggerOfATick(t *testing.T) {
	app := func(generation, observed int64, annotations map[string]string, handled string) *plumbv1.App {
		return &plumbv1.App{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: generation, Annotations: annotations},
			Status:     plumbv1.AppStatus{ObservedGeneration: observed, LastHandledSyncRequest: handled},
		}
	}
	webhook := map[string]string{plumbv1.AnnotationSyncRequestedAt: "t2", plumbv1.AnnotationSyncRequestedBy: plumbv1.SyncRequestedByWebhook}
	byHand := map[string]string{plumbv1.AnnotationSyncRequestedAt: "t2"}
	for _, tt := range []struct {
		name  string
		app   *plumbv1.App
		tried int64 // the generation the last Read tried; 0: none since the controller started
		queue queue.Wake
		marks enqueueMarks
		want  Trigger
	}{
		{"a new App", app(1, 0, nil, ""), 0, queue.WakeTimer, enqueueMarks{}, TriggerSpec},
		{"a changed spec, brought forward by its event", app(3, 2, nil, ""), 2, queue.WakeEvent, enqueueMarks{}, TriggerSpec},
		{"a spec changed while the controller was down", app(3, 2, nil, ""), 0, queue.WakeTimer, enqueueMarks{}, TriggerSpec},
		{"the retry of a spec that failed", app(3, 2, nil, ""), 3, queue.WakeTimer, enqueueMarks{}, TriggerTimer},
		{"a push", app(2, 2, webhook, "t1"), 2, queue.WakeEvent, enqueueMarks{}, TriggerWebhook},
		{"a sync annotation by hand", app(2, 2, byHand, "t1"), 2, queue.WakeEvent, enqueueMarks{}, TriggerManual},
		{"a stale webhook mark under a new request by hand", app(2, 2, map[string]string{plumbv1.AnnotationSyncRequestedAt: "t2", plumbv1.AnnotationSyncRequestedBy: "someone"}, "t1"), 2, queue.WakeEvent, enqueueMarks{}, TriggerManual},
		{"a request already handled, and the timer", app(2, 2, webhook, "t2"), 2, queue.WakeTimer, enqueueMarks{}, TriggerTimer},
		{"a request already handled, and an object's event", app(2, 2, webhook, "t2"), 2, queue.WakeEvent, enqueueMarks{}, TriggerDrift},
		{"the fallback timer", app(2, 2, nil, ""), 2, queue.WakeTimer, enqueueMarks{}, TriggerTimer},
		{"an object's event", app(2, 2, nil, ""), 2, queue.WakeEvent, enqueueMarks{}, TriggerDrift},
		{"a dependency's readiness", app(2, 2, nil, ""), 2, queue.WakeEvent, enqueueMarks{dependency: true}, TriggerDependency},
		{"a dependency's readiness and an object's event", app(2, 2, nil, ""), 2, queue.WakeEvent, enqueueMarks{dependency: true, full: true}, TriggerDrift},
		{"a dependency's readiness, and the timer", app(2, 2, nil, ""), 2, queue.WakeTimer, enqueueMarks{dependency: true}, TriggerTimer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{}
			if tt.tried > 0 {
				r.memory.triedRead(client.ObjectKeyFromObject(tt.app), tt.tried)
			}
			if got := r.triggerOf(tt.app, tt.queue, tt.marks); got != tt.want {
				t.Errorf("trigger %q, want %q", got, tt.want)
			}
		})
	}
}

// Every trigger the tick names is a series of its own in the syncs metric
// (an unknown one would be folded into "timer").
func TestEveryTriggerHasItsOwnSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, trigger := range Triggers {
		m.ObserveSync(string(trigger))
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "plumb_syncs_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetCounter().GetValue() != 1 {
				t.Errorf("series %v counted %v, want 1", s.GetLabel(), s.GetCounter().GetValue())
			}
		}
		if len(f.GetMetric()) != len(Triggers) {
			t.Errorf("%d series for %d triggers", len(f.GetMetric()), len(Triggers))
		}
		return
	}
	t.Fatal("plumb_syncs_total not gathered")
}
