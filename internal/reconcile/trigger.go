package reconcile

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// Trigger is what asked for a tick, in the App's terms (the queue's Wake
// says only whether its timer or an event woke it), as the syncs metric,
// status.recentTicks and the tick's log lines name it.
type Trigger string

// The triggers of a tick.
const (
	TriggerTimer   Trigger = "timer"   // the fallback timer, or a retry after a failure
	TriggerWebhook Trigger = "webhook" // a push webhook (the sync annotation, by the receiver)
	TriggerDrift   Trigger = "drift"   // one of the App's objects changed
	TriggerManual  Trigger = "manual"  // the sync annotation, set by anyone but the receiver
	TriggerSpec    Trigger = "spec"    // a new App, or a spec not tried yet
	// TriggerDependency: an App in spec.dependsOn changed its readiness.
	TriggerDependency Trigger = "dependency"
)

// Triggers lists every trigger, for metrics that create their series at zero.
var Triggers = []Trigger{TriggerTimer, TriggerWebhook, TriggerDrift, TriggerManual, TriggerSpec, TriggerDependency}

// triggerOf tells what asked for this tick of app, from the App itself and
// the queue's word (timer or event). A spec that this controller has not
// tried yet comes first, then an unanswered sync request; the timer and
// events of the App's objects are what is left. Call it before the Read
// phase records what it tried.
func (r *Reconciler) triggerOf(app *plumbv1.App, queued queue.Wake, marks enqueueMarks) Trigger {
	tried, known := r.memory.readGeneration(client.ObjectKeyFromObject(app))
	if app.Status.ObservedGeneration != app.Generation && (!known || tried != app.Generation) {
		return TriggerSpec
	}
	if request := app.Annotations[plumbv1.AnnotationSyncRequestedAt]; request != "" && request != app.Status.LastHandledSyncRequest {
		if app.Annotations[plumbv1.AnnotationSyncRequestedBy] == plumbv1.SyncRequestedByWebhook {
			return TriggerWebhook
		}
		return TriggerManual
	}
	if queued == queue.WakeTimer {
		return TriggerTimer
	}
	if marks.dependency && !marks.full {
		return TriggerDependency
	}
	return TriggerDrift
}
