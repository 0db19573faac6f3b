package reconcile

import (
	"errors"
	"fmt"
	"sort"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/internal/repourl"
	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
)

// maxNotifiedFields bounds the fields a notification lists per object.
const maxNotifiedFields = 20

// event is a notification event about app, with what every event carries.
func (r *Reconciler) event(app *plumbv1.App, kind plumbv1.NotificationEvent, revision string) notify.Event {
	return notify.Event{
		Kind: kind, App: client.ObjectKeyFromObject(app), AppLabels: app.Labels, Destination: app.Spec.Destination.SecretName(),
		Source: repourl.WithoutCredentials(app.Spec.Source.Location()), Revision: revision, Commit: git.ParseRevision(revision).Hash,
		Time: r.now(),
	}
}

// notifyDrift tells the App's Notifications about drift episodes, one
// DriftDetected when an episode starts (an object of the App drifted, or
// a field was first left to another manager, while no episode was open)
// and one DriftResolved when it ends (nothing is left drifted:
// plumb put it all back, in the same tick under driftPolicy heal, or
// someone else did, or Git changed to match).
func (r *Reconciler) notifyDrift(app *plumbv1.App, p *plan, healFailed bool, revision string) {
	if r.Notifier == nil {
		return
	}
	key := client.ObjectKeyFromObject(app)
	ids := make([]objectID, 0, len(p.drifted))
	for id := range p.drifted {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	started, left := false, 0
	var objects []notify.DriftedObject
	count := 0
	for _, id := range ids {
		d := p.drifted[id]
		hasDrift := len(d.changes)+len(d.additions) > 0 || d.deleted
		if hasDrift || d.newConflict {
			started = true // an episode starts unless one is open already
		}
		if p.left[id] || (healFailed && hasDrift) || len(p.conflicts[id]) > 0 {
			left++
		}
		if hasDrift || d.newConflict {
			count++
			if len(objects) < maxListed {
				objects = append(objects, notifiedObject(id, d))
			}
		}
	}
	for id := range p.conflicts {
		if _, ok := p.drifted[id]; !ok {
			left++ // a field left to another manager: drift that stays
		}
	}
	open := r.memory.driftNotifiedOf(key)
	if !open && started && count > 0 {
		e := r.event(app, plumbv1.EventDriftDetected, revision)
		e.Objects, e.Count, e.Healed = objects, count, left == 0
		e.Message = notify.Summary(&e)
		r.Notifier.Notify(e)
		open = true
	}
	if open && left == 0 {
		e := r.event(app, plumbv1.EventDriftResolved, revision)
		e.Healed = true
		e.Message = notify.Summary(&e)
		r.Notifier.Notify(e)
		open = false
	}
	r.memory.setDriftNotified(key, open)
}

// endDriftEpisode resolves the App's open drift episode, saying why (the
// App is deleted, or its objects are left behind in a former destination).
func (r *Reconciler) endDriftEpisode(app *plumbv1.App, why string) {
	key := client.ObjectKeyFromObject(app)
	if r.Notifier == nil || !r.memory.driftNotifiedOf(key) {
		return
	}
	r.memory.setDriftNotified(key, false)
	e := r.event(app, plumbv1.EventDriftResolved, app.Status.LastAppliedRevision)
	e.Message = fmt.Sprintf("Drift in App %s/%s resolved: %s", app.Namespace, app.Name, why)
	r.Notifier.Notify(e)
}

// notifiedObject is one drifted object as a notification lists it.
func notifiedObject(id objectID, d drift) notify.DriftedObject {
	o := notify.DriftedObject{Kind: id.Kind, Namespace: id.Namespace, Name: id.Name, Deleted: d.deleted}
	if d.obj != nil {
		o.APIVersion = d.obj.GetAPIVersion()
	}
	for _, c := range d.changes {
		if len(o.Fields) == maxNotifiedFields {
			break
		}
		f := notify.FieldChange{Path: c.Path, Before: c.Before, After: c.After, Manager: c.Manager, Operation: c.Operation}
		if c.Time != nil {
			t := c.Time.Time
			f.Time = &t
		}
		o.Fields = append(o.Fields, f)
	}
	for _, a := range d.additions {
		if len(o.Fields) == maxNotifiedFields {
			break
		}
		o.Fields = append(o.Fields, notify.FieldChange{Path: a.Path})
	}
	return o
}

// notifyPending tells the App's Notifications that a tick is applying a
// revision the App had not applied, once per revision.
func (r *Reconciler) notifyPending(app *plumbv1.App, revision string) {
	key := client.ObjectKeyFromObject(app)
	if r.Notifier == nil || revision == app.Status.LastAppliedRevision || r.memory.revisionSentFor(key, revision) {
		return
	}
	r.memory.sendRevision(key, sentRevision{revision: revision, kind: plumbv1.EventRevisionPending})
	e := r.event(app, plumbv1.EventRevisionPending, revision)
	e.Message = fmt.Sprintf("plumb is applying %s to App %s/%s", shortRevision(revision), app.Namespace, app.Name)
	r.Notifier.Notify(e)
}

// notifyOutcome tells the App's Notifications how a tick ended for the
// revision it worked on: succeeded when the App is Ready at it (all of it
// applied: under driftPolicy alert, drift left in place keeps it pending),
// failed naming the phase (or the reason Ready is False). A revision that
// went live stays as told: a later failure at it (a Git or API server
// outage) is for the alerts to report, not the commit's status; and a Read
// that failed before it knew which commit it read says nothing. Each
// outcome is told once, until it changes.
func (r *Reconciler) notifyOutcome(app *plumbv1.App, err error) {
	if r.Notifier == nil {
		return
	}
	key := client.ObjectKeyFromObject(app)
	revision, applied := app.Status.LastAttemptedRevision, app.Status.LastAppliedRevision
	if revision == "" {
		return
	}
	var e notify.Event
	var phaseErr *PhaseError
	var readErr *source.Error
	switch {
	case err == nil && revision != applied:
		// Applied but for drift left in place: pending again, should a
		// failure have been told meanwhile.
		e = r.event(app, plumbv1.EventRevisionPending, revision)
		e.Message = fmt.Sprintf("plumb is applying %s to App %s/%s", shortRevision(revision), app.Namespace, app.Name)
	case err == nil:
		ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if ready == nil {
			return
		}
		if ready.Reason == plumbv1.ReasonProgressing || ready.Reason == plumbv1.ReasonHealthCheckFailed {
			if last := r.memory.lastSent(key); last.revision == revision && last.kind == plumbv1.EventRevisionSucceeded {
				return // live already: its objects' health moving later is not a delivery's outcome
			}
		}
		switch {
		case ready.Status == metav1.ConditionTrue:
			e = r.event(app, plumbv1.EventRevisionSucceeded, revision)
			e.Message = fmt.Sprintf("App %s/%s is Ready at %s", app.Namespace, app.Name, shortRevision(revision))
		case ready.Reason == plumbv1.ReasonProgressing:
			// Applied; its objects are still rolling out (the health
			// re-assessment tells the outcome).
			e = r.event(app, plumbv1.EventRevisionPending, revision)
			e.Message = fmt.Sprintf("plumb applied %s to App %s/%s and waits for its objects to become healthy", shortRevision(revision), app.Namespace, app.Name)
		default:
			e = r.event(app, plumbv1.EventRevisionFailed, revision)
			e.Reason = ready.Reason
			e.Message = fmt.Sprintf("App %s/%s is not Ready at %s: %s", app.Namespace, app.Name, shortRevision(revision), ready.Reason)
		}
	case !errors.As(err, &phaseErr) || revision == applied:
		return
	case phaseErr.Phase == PhaseRead && (!errors.As(err, &readErr) || readErr.Revision != revision):
		return // the read failed before it knew the commit (Git unreachable, say)
	default:
		e = r.event(app, plumbv1.EventRevisionFailed, revision)
		e.Phase, e.Reason = string(phaseErr.Phase), phaseErr.Reason
		reason := phaseErr.Reason
		if phaseErr.Detail != "" {
			reason += ", " + phaseErr.Detail
		}
		e.Message = fmt.Sprintf("the %s phase failed for App %s/%s (%s)", phaseErr.Phase, app.Namespace, app.Name, reason)
	}
	detail := ""
	if e.Phase != "" || e.Reason != "" {
		detail = e.Phase + "/" + e.Reason
	}
	if r.memory.sendRevision(key, sentRevision{revision: e.Revision, kind: e.Kind, detail: detail}) {
		r.Notifier.Notify(e)
	}
}

// shortRevision is a recorded revision with its digest cut short, for
// messages.
func shortRevision(recorded string) string { return revision.Parse(recorded).Short() }
