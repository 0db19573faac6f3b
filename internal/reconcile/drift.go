package reconcile

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/diff"
)

// recordDrift sets the Drifted condition and summary, and records a
// DriftDetected Event once per drift episode, and DriftConflict when a field
// is first left to a manager that keeps changing it. The summary counts what
// is still drifted after this tick (left by the alert policy, or left to
// another manager): a healed object is not. It is always there, a count of
// 0 saying "none".
//
// healFailed says the Apply phase failed: what it was to put back may
// still be drifted, so it is counted and reported as drifted, not healed.
func (r *Reconciler) recordDrift(app *plumbv1.App, p *plan, healFailed bool) {
	now := r.now()
	summary := &plumbv1.DriftSummary{}
	if previous := app.Status.Drift; previous != nil {
		summary.LastDetectedTime = previous.LastDetectedTime
	}
	app.Status.Drift = summary
	if len(p.drifted) == 0 && len(p.conflicts) == 0 {
		setCondition(app, plumbv1.ConditionDrifted, false, plumbv1.ReasonSucceeded, "live objects match Git", now)
		return
	}
	if len(p.drifted) > 0 {
		t := metav1.NewTime(now)
		summary.LastDetectedTime = &t
	}
	ids := map[objectID]bool{}
	for id := range p.drifted {
		ids[id] = true
	}
	for id := range p.conflicts {
		ids[id] = true
	}
	sorted := make([]objectID, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	var left, healed, conflicts []string
	for _, id := range sorted {
		d, drifted := p.drifted[id]
		fields, managers := []string{}, []string{}
		hasDrift := drifted && (len(d.changes)+len(d.additions) > 0 || d.deleted)
		switch {
		case p.left[id] || (healFailed && hasDrift):
			left = append(left, describeDrift(id, d))
			for _, c := range d.changes {
				fields, managers = append(fields, c.Path), appendOnce(managers, c.Manager)
			}
			for _, a := range d.additions {
				fields = append(fields, a.Path)
			}
			if d.deleted {
				fields = append(fields, "(deleted)")
			}
		case hasDrift:
			healed = append(healed, describeDrift(id, d))
		}
		var lefts []string
		for _, c := range p.conflicts[id] {
			lefts = append(lefts, fmt.Sprintf("%s left to %s", c.path, c.manager))
			fields, managers = append(fields, c.path.String()), appendOnce(managers, c.manager)
		}
		if len(lefts) > 0 {
			conflicts = append(conflicts, id.String()+": "+strings.Join(lefts, ", "))
		}
		if len(fields) > 0 {
			summary.Count++
			if len(summary.Objects) < maxListed {
				var leftTo []plumbv1.LeftField
				for _, c := range p.conflicts[id] {
					if c.fields != "" {
						leftTo = append(leftTo, plumbv1.LeftField{Path: c.path.String(), Manager: c.manager, Fields: c.fields})
					}
				}
				summary.Objects = append(summary.Objects, plumbv1.DriftedObject{ObjectRef: refOfID(id, d), Fields: fields, Managers: managers, LeftTo: leftTo})
			}
		}
		if drifted && d.newEpisode {
			r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonDriftDetected, "%s", truncate(describeDrift(id, d), 1000))
		}
		if drifted && d.newConflict {
			r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonDriftConflict,
				"%s: another manager keeps changing these fields back; plumb leaves them to it until Git changes the object: %s",
				id, truncate(strings.Join(lefts, ", "), 800))
		}
	}
	switch {
	case len(conflicts) > 0:
		setCondition(app, plumbv1.ConditionDrifted, true, plumbv1.ReasonDriftConflict,
			"fields another manager keeps changing back, left to it: "+strings.Join(conflicts, "; "), now)
	case len(left) > 0 && healFailed:
		setCondition(app, plumbv1.ConditionDrifted, true, plumbv1.ReasonDriftDetected, "changed outside Git, not put back (the Apply phase failed): "+strings.Join(left, "; "), now)
	case len(left) > 0:
		setCondition(app, plumbv1.ConditionDrifted, true, plumbv1.ReasonDriftDetected, "changed outside Git (policy alert): "+strings.Join(left, "; "), now)
	default:
		setCondition(app, plumbv1.ConditionDrifted, false, plumbv1.ReasonDriftHealed, "put back: "+strings.Join(healed, "; "), now)
	}
}

// fieldsOf is one field as managedFields writes fields (fieldsV1).
func fieldsOf(path fieldpath.Path) (string, error) {
	data, err := fieldpath.NewSet(path).ToJSON()
	return string(data), err
}

// pathsOf reads fieldsOf's encoding back.
func pathsOf(encoded string) ([]fieldpath.Path, error) {
	set := &fieldpath.Set{}
	if err := set.FromJSON(strings.NewReader(encoded)); err != nil {
		return nil, err
	}
	var out []fieldpath.Path
	set.Iterate(func(p fieldpath.Path) { out = append(out, p.Copy()) })
	return out, nil
}

// refOfID is the ObjectRef of a drifted or conflicted object.
func refOfID(id objectID, d drift) plumbv1.ObjectRef {
	if d.obj != nil {
		return refOf(d.obj)
	}
	return plumbv1.ObjectRef{Group: id.Group, Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}
}

// describeDrift is one object's drift in words.
func describeDrift(id objectID, d drift) string {
	switch {
	case d.deleted:
		return id.String() + " was deleted"
	case len(d.changes) == 0:
		return id.String() + " differs from Git"
	}
	return id.String() + ": " + diff.Describe(d.changes)
}
