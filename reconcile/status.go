package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/compact"
	"github.com/plumb-dev/plumb/diff"
)

// Only the tick writes an App's status, at most once per tick (see Tick's
// defer and writeStatus).

// maxListed bounds how many objects a message or the drift summary names.
const maxListed = 20

// cutList cuts a list of what a message names to maxListed items, the
// last saying how many more there are.
func cutList(items []string) []string {
	if len(items) <= maxListed {
		return items
	}
	return append(items[:maxListed:maxListed], fmt.Sprintf("and %d more", len(items)-maxListed))
}

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

// writeStatus writes the App's status when the tick changed it, with
// optimistic locking: on a conflict it reads the App afresh from the API
// server and writes the tick's status over that. A status that changed in
// nothing but its times is written only as a heartbeat (see
// heartbeatEvery) — when the tick started from the very App that plumb
// last wrote; a copy plumb cannot vouch for (after a restart, or after
// someone else wrote the App) is written over, so no stale field survives.
//
// onlyIfChanged (a re-assessment of health) writes only a status that
// changed, and does not count towards the heartbeat.
func (r *Reconciler) writeStatus(ctx context.Context, original, app *plumbv1.App, onlyIfChanged bool, log *zap.Logger) {
	if onlyIfChanged && equality.Semantic.DeepEqual(original.Status, app.Status) {
		return
	}
	key := client.ObjectKeyFromObject(app)
	log = log.With(zap.String("phase", "status"), zap.String("revision", app.Status.LastAttemptedRevision))
	heartbeat := original.ResourceVersion == r.memory.appRV(key) && sameButTimes(original.Status, app.Status)
	if heartbeat && r.memory.skipWrite(key) {
		return
	}
	// Whatever brought this write (a tick, a re-assessment, a suspended
	// App), it carries the ticks that earlier writes skipped.
	if ticks := r.memory.ticksOf(key); ticks != nil {
		app.Status.RecentTicks = ticks
	}
	var patch client.Patch = client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if heartbeat {
		// Only the times moved: send them alone rather than compute a patch
		// from two encodings of the whole App (its inventory of thousands).
		data, err := heartbeatPatch(original.ResourceVersion, app.Status)
		if err != nil {
			log.Error("Failed to write status", zap.Error(err))
			return
		}
		patch = client.RawPatch(types.MergePatchType, data)
	}
	err := r.Client.Status().Patch(ctx, app, patch)
	if apierrors.IsConflict(err) && r.APIReader != nil {
		status := app.Status
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			fresh := &plumbv1.App{}
			if err := r.APIReader.Get(ctx, key, fresh); err != nil {
				return err
			}
			*app = *fresh.DeepCopy()
			app.Status = status
			return r.Client.Status().Patch(ctx, app, client.MergeFromWithOptions(fresh, client.MergeFromWithOptimisticLock{}))
		})
	}
	switch {
	case err == nil:
		r.memory.setAppRV(key, app.ResourceVersion)
		r.memory.statusWritten(key)
	case !apierrors.IsNotFound(err):
		log.Error("Failed to write status", zap.Error(err))
	}
}

// heartbeatPatch is a JSON merge patch of a status's times alone, with the
// resourceVersion it applies to (the server refuses it, Conflict, when the
// App changed since).
func heartbeatPatch(resourceVersion string, status plumbv1.AppStatus) ([]byte, error) {
	type phaseTime struct {
		LastSuccessTime *metav1.Time `json:"lastSuccessTime"`
	}
	times := map[string]any{
		"recentTicks":            status.RecentTicks,
		"lastTickTime":           status.LastTickTime,
		"lastSuccessfulTickTime": status.LastSuccessfulTickTime,
		"phases": map[string]phaseTime{
			"read": {status.Phases.Read.LastSuccessTime}, "observe": {status.Phases.Observe.LastSuccessTime},
			"diff": {status.Phases.Diff.LastSuccessTime}, "apply": {status.Phases.Apply.LastSuccessTime},
		},
	}
	if status.Drift != nil {
		times["drift"] = map[string]any{"lastDetectedTime": status.Drift.LastDetectedTime}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion}, "status": times})
}

// sameButTimes reports whether two statuses differ in nothing but the times
// that move on every tick. The inventory, by far the largest part, is
// compared entry by entry rather than by reflection, and not copied.
func sameButTimes(a, b plumbv1.AppStatus) bool {
	invA, invB := a.Inventory, b.Inventory
	if (invA == nil) != (invB == nil) || (invA != nil && !slices.Equal(invA.Entries, invB.Entries)) {
		return false
	}
	a.Inventory, b.Inventory = nil, nil
	return equality.Semantic.DeepEqual(withoutTimes(a), withoutTimes(b))
}

// withoutTimes is a status with the times that move on every tick cleared.
func withoutTimes(status plumbv1.AppStatus) plumbv1.AppStatus {
	s := *status.DeepCopy()
	s.LastTickTime, s.LastSuccessfulTickTime = nil, nil
	s.RecentTicks = nil
	for _, ps := range []*plumbv1.PhaseStatus{&s.Phases.Read, &s.Phases.Observe, &s.Phases.Diff, &s.Phases.Apply} {
		ps.LastSuccessTime = nil
	}
	if s.Drift != nil {
		s.Drift.LastDetectedTime = nil
	}
	return s
}

// recordOutcome sets conditions, phase status and times, logs the result
// and records an Event when something changed or a failure is new. On
// success it returns what was applied (Ready's message when every object
// is healthy; settleHealth then decides Ready).
func (r *Reconciler) recordOutcome(app *plumbv1.App, changes *fluxssa.ChangeSet, err error, start time.Time, log *zap.Logger) *appliedOutcome {
	now := r.now()
	t := metav1.NewTime(now)
	app.Status.LastTickTime = &t
	if summary := changeSummary(changes); summary != "" {
		r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonApplied, "revision %s: %s", app.Status.LastAttemptedRevision, summary)
	}
	if err == nil {
		app.Status.ObservedGeneration = app.Generation
		app.Status.LastSuccessfulTickTime = &t
		message := fmt.Sprintf("Applied revision %s (%d objects)", app.Status.LastAppliedRevision, inventoryLen(app)-len(app.Status.Kept))
		if len(app.Status.Kept) > 0 {
			message = fmt.Sprintf("Applied revision %s (%d objects; %d that left Git kept by the prune guard, see status.kept)",
				app.Status.LastAppliedRevision, inventoryLen(app)-len(app.Status.Kept), len(app.Status.Kept))
		}
		log.Info("Ticked", zap.String("phase", string(PhaseApply)), zap.String("revision", app.Status.LastAppliedRevision), zap.Duration("took", now.Sub(start)))
		return &appliedOutcome{generation: app.Generation, revision: app.Status.LastAppliedRevision, message: message}
	}

	var phaseErr *PhaseError
	if !errors.As(err, &phaseErr) {
		phaseErr = &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: err}
	}
	ps := phaseStatus(app, phaseErr.Phase)
	message := fmt.Sprintf("%s phase failed: %v", phaseErr.Phase, phaseErr.Err)
	isNew := ps.LastError != message
	ps.LastFailureTime = &t
	ps.LastError = truncate(message, 2048)
	ps.Reason = phaseErr.Detail
	if ps.Reason == "" {
		ps.Reason = phaseErr.Reason
	}
	ps.ConsecutiveFailures++
	setCondition(app, plumbv1.ConditionReady, false, phaseErr.Reason, message, now)
	setCondition(app, plumbv1.ConditionReconciling, !phaseErr.Terminal, phaseErr.Reason, message, now)
	setCondition(app, plumbv1.ConditionStalled, phaseErr.Terminal, phaseErr.Reason, message, now)
	if isNew {
		r.Events.Eventf(app, corev1.EventTypeWarning, phaseErr.Reason, "%s", truncate(message, 1024))
	}
	log.Error("Tick failed", zap.String("phase", string(phaseErr.Phase)), zap.String("revision", app.Status.LastAttemptedRevision), zap.String("reason", phaseErr.Reason),
		zap.String("detail", phaseErr.Detail), zap.Error(phaseErr.Err))
	return nil
}

// changeSummary lists what an apply and prune changed ("" when nothing).
func changeSummary(changes *fluxssa.ChangeSet) string {
	if changes == nil {
		return ""
	}
	var parts []string
	for _, e := range changes.Entries {
		switch e.Action {
		case fluxssa.CreatedAction, fluxssa.ConfiguredAction, fluxssa.DeletedAction:
			parts = append(parts, e.Subject+" "+string(e.Action))
		}
	}
	parts = cutList(parts)
	return strings.Join(parts, ", ")
}

// maxChangeSetEntries bounds the objects status.lastChangeSet lists.
const maxChangeSetEntries = 50

// recordChangeSet keeps what the tick created, configured and deleted in
// status.lastChangeSet, when it changed anything (a tick that changed
// nothing leaves the last one), with the sync request it answered.
func (r *Reconciler) recordChangeSet(app *plumbv1.App, changes *fluxssa.ChangeSet, answered string) {
	if !changedObjects(changes) {
		return // nothing created, configured or deleted: the last one stays
	}
	cs := &plumbv1.ChangeSet{Revision: app.Status.LastAttemptedRevision, Time: metav1.NewTime(r.now()), SyncRequest: answered}
	for _, e := range changes.Entries {
		switch e.Action {
		case fluxssa.CreatedAction:
			cs.Created++
		case fluxssa.ConfiguredAction:
			cs.Configured++
		case fluxssa.DeletedAction:
			cs.Deleted++
		default:
			continue
		}
		if len(cs.Entries) < maxChangeSetEntries {
			cs.Entries = append(cs.Entries, plumbv1.ChangeSetEntry{Object: changeSubject(e), Action: string(e.Action)})
		}
	}
	app.Status.LastChangeSet = cs
}

// changeSubject names a change set's object as status names objects.
func changeSubject(e fluxssa.ChangeSetEntry) string {
	if e.ObjMetadata.Name == "" {
		return e.Subject // an entry plumb made, already so named
	}
	return plumbv1.ObjectRef{Group: e.ObjMetadata.GroupKind.Group, Kind: e.ObjMetadata.GroupKind.Kind,
		Namespace: e.ObjMetadata.Namespace, Name: e.ObjMetadata.Name}.String()
}

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

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
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

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}

// objectID identifies an object across versions of its kind.
type objectID struct {
	Group, Kind, Namespace, Name string
}

// idOf is an object's ID. It reads the fields directly (every phase asks it
// of every object, every tick): apiVersion's group is what precedes "/".
func idOf(u *unstructured.Unstructured) objectID {
	apiVersion, _ := u.Object["apiVersion"].(string)
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = "" // the core group: "v1"
	}
	kind, _ := u.Object["kind"].(string)
	metadata, _ := u.Object["metadata"].(map[string]any)
	namespace, _ := metadata["namespace"].(string)
	name, _ := metadata["name"].(string)
	return objectID{Group: group, Kind: kind, Namespace: namespace, Name: name}
}

// idOfLive is a cached live object's ID.
func idOfLive(o *compact.Object) objectID {
	gvk := o.GroupVersionKind()
	return objectID{Group: gvk.Group, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}
}

func idOfRef(r plumbv1.ObjectRef) objectID {
	return objectID{Group: r.Group, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

func (id objectID) String() string {
	return plumbv1.ObjectRef{Group: id.Group, Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}.String()
}

func refOf(u *unstructured.Unstructured) plumbv1.ObjectRef {
	gvk := u.GroupVersionKind()
	return plumbv1.ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

func refsOf(objs []*unstructured.Unstructured) []plumbv1.ObjectRef {
	out := make([]plumbv1.ObjectRef, 0, len(objs))
	for _, o := range objs {
		out = append(out, refOf(o))
	}
	return out
}

// mergeRefs is the union of an inventory and refs, by ID.
func mergeRefs(inv *plumbv1.Inventory, refs []plumbv1.ObjectRef) []plumbv1.ObjectRef {
	seen := map[objectID]bool{}
	var out []plumbv1.ObjectRef
	add := func(r plumbv1.ObjectRef) {
		id := idOfRef(r)
		if !seen[id] {
			seen[id] = true
			out = append(out, r)
		}
	}
	if inv != nil {
		for _, e := range inv.Entries {
			add(e.ObjectRef)
		}
	}
	for _, r := range refs {
		add(r)
	}
	return out
}

// setInventory stores refs in a stable order, each with the digest of the
// fields plumb owned after its last write of it (appliedFields; "" when
// none is known).
func setInventory(app *plumbv1.App, refs []plumbv1.ObjectRef, appliedFields func(objectID) string) {
	entries := make([]plumbv1.InventoryEntry, len(refs))
	keys := make(map[objectID]string, len(refs))
	for i, ref := range refs {
		id := idOfRef(ref)
		entries[i] = plumbv1.InventoryEntry{ObjectRef: ref, AppliedFields: appliedFields(id)}
		keys[id] = ref.Group + "/" + ref.Kind + "/" + ref.Namespace + "/" + ref.Name
	}
	sort.Slice(entries, func(i, j int) bool {
		return keys[idOfRef(entries[i].ObjectRef)] < keys[idOfRef(entries[j].ObjectRef)]
	})
	app.Status.Inventory = &plumbv1.Inventory{Entries: entries}
}

// appliedFieldsOf is the digest of the fields plumb owned after its last
// write of each object of the App, from the inventory (after a restart,
// the only memory of it).
func appliedFieldsOf(inv *plumbv1.Inventory) map[objectID]string {
	out := map[objectID]string{}
	if inv == nil {
		return out
	}
	for _, e := range inv.Entries {
		if e.AppliedFields != "" {
			out[idOfRef(e.ObjectRef)] = e.AppliedFields
		}
	}
	return out
}

func inventoryLen(app *plumbv1.App) int {
	if app.Status.Inventory == nil {
		return 0
	}
	return len(app.Status.Inventory.Entries)
}

func inInventory(app *plumbv1.App, obj *unstructured.Unstructured) bool {
	if app.Status.Inventory == nil {
		return false
	}
	id := idOf(obj)
	for _, e := range app.Status.Inventory.Entries {
		if idOfRef(e.ObjectRef) == id {
			return true
		}
	}
	return false
}
