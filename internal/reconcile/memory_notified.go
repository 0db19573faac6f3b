package reconcile

import (
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// notifiedRecord is what the App's Notifications were told: whether a
// DriftDetected was sent and its DriftResolved not yet (an open drift
// episode), and the last revision event.
type notifiedRecord struct {
	drift    bool
	revision sentRevision
}

// sentRevision is a revision event as sent: the revision, the event and
// what failed.
type sentRevision struct {
	revision string
	kind     plumbv1.NotificationEvent
	detail   string
}

// driftNotifiedOf reports whether the App's drift episode was announced (a
// DriftDetected sent, its DriftResolved not yet).
func (m *memory) driftNotifiedOf(key types.NamespacedName) bool {
	return inApp(m, key, func(a *appMemory) bool { return a.notified.drift })
}

// setDriftNotified records whether the App's drift episode is announced.
func (m *memory) setDriftNotified(key types.NamespacedName, open bool) {
	m.updateApp(key, func(a *appMemory) { a.notified.drift = open })
}

// sendRevision records a revision event and reports whether it differs
// from the last one sent (and so is to be sent).
func (m *memory) sendRevision(key types.NamespacedName, sent sentRevision) bool {
	return inApp(m, key, func(a *appMemory) bool {
		if a.notified.revision == sent {
			return false
		}
		a.notified.revision = sent
		return true
	})
}

// lastSent is the last revision event sent for the App.
func (m *memory) lastSent(key types.NamespacedName) sentRevision {
	return inApp(m, key, func(a *appMemory) sentRevision { return a.notified.revision })
}

// revisionSentFor reports whether any revision event was sent for revision.
func (m *memory) revisionSentFor(key types.NamespacedName, revision string) bool {
	return inApp(m, key, func(a *appMemory) bool { return a.notified.revision.revision == revision })
}
