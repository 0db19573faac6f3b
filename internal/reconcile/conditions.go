package reconcile

import (
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// phaseStatus returns the status entry of a phase.
func phaseStatus(app *plumbv1.App, phase Phase) *plumbv1.PhaseStatus {
	switch phase {
	case PhaseRead:
		return &app.Status.Phases.Read
	case PhaseObserve:
		return &app.Status.Phases.Observe
	case PhaseDiff:
		return &app.Status.Phases.Diff
	default:
		return &app.Status.Phases.Apply
	}
}

func markSuccess(app *plumbv1.App, phase Phase, now time.Time) {
	ps := phaseStatus(app, phase)
	t := metav1.NewTime(now)
	ps.LastSuccessTime = &t
	ps.LastError, ps.Reason, ps.ConsecutiveFailures = "", "", 0
}

func setCondition(app *plumbv1.App, condType string, status bool, reason, message string, now time.Time) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	setConditionStatus(app, condType, s, reason, message, now)
}

// setConditionStatus sets a condition that may also be Unknown.
func setConditionStatus(app *plumbv1.App, condType string, s metav1.ConditionStatus, reason, message string, now time.Time) {
	apimeta.SetStatusCondition(&app.Status.Conditions, metav1.Condition{
		Type: condType, Status: s, Reason: reason, Message: truncate(message, 1024),
		ObservedGeneration: app.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}
