package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestReadinessChangedIsWhatDependentsWaitFor(t *testing.T) {
	ready := func(status metav1.ConditionStatus, generation int64) []metav1.Condition {
		return []metav1.Condition{{Type: plumbv1.ConditionReady, Status: status, ObservedGeneration: generation, Reason: "R", Message: "m"}}
	}
	base := func() *plumbv1.App {
		a := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
		a.Status.Conditions = ready(metav1.ConditionTrue, 1)
		a.Status.ObservedGeneration = 1
		a.Status.LastAppliedRevision, a.Status.LastAttemptedRevision = "main@sha1:a", "main@sha1:a"
		return a
	}
	for _, tc := range []struct {
		name   string
		change func(*plumbv1.App)
		want   bool
	}{
		{"nothing", func(*plumbv1.App) {}, false},
		{"only Ready's message and the times", func(a *plumbv1.App) {
			a.Status.Conditions[0].Message = "other"
			a.Status.LastTickTime = &metav1.Time{}
		}, false},
		{"Ready's status", func(a *plumbv1.App) { a.Status.Conditions = ready(metav1.ConditionUnknown, 1) }, true},
		{"Ready for a new generation", func(a *plumbv1.App) { a.Status.Conditions = ready(metav1.ConditionTrue, 2) }, true},
		{"no Ready condition any more", func(a *plumbv1.App) { a.Status.Conditions = nil }, true},
		{"the spec", func(a *plumbv1.App) { a.Generation = 2 }, true},
		{"the observed generation", func(a *plumbv1.App) { a.Status.ObservedGeneration = 2 }, true},
		{"the revision read", func(a *plumbv1.App) { a.Status.LastAttemptedRevision = "main@sha1:b" }, true},
		{"the revision applied", func(a *plumbv1.App) { a.Status.LastAppliedRevision = "main@sha1:b" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := base()
			tc.change(n)
			if got := readinessChanged(base(), n); got != tc.want {
				t.Errorf("readinessChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
