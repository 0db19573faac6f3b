package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/internal/syncorder"
	"github.com/plumb-dev/plumb/ssa"
)

// An ordered sync is the Apply phase of a revision whose objects have
// hooks or more than one wave (package syncorder places them). It runs
// PreSync hooks wave by wave, then the ordinary objects (and Sync hooks)
// wave by wave, each wave applied and then waited for until its objects
// are healthy and its hooks done, then prunes what left Git in reverse
// wave order, then runs PostSync hooks; a failure runs the SyncFail hooks
// instead of what is left. A wait ends the tick: the sync goes on at the
// next, which the objects' and hooks' own events bring forward, from
// where status.sync says it is. A hook runs once per revision: the
// status records it, so a restart runs none twice. A tick of an App
// whose objects are ordered but that changes nothing starts no sync, and
// runs no hook.

// maxHookRuns bounds the hooks' runs of one sync (status.sync.hooks
// holds each).
const maxHookRuns = 100

// ordering is the placement of a revision's objects.
type ordering struct {
	// waves of the ordinary objects, by ID (absent: wave 0).
	waves map[objectID]int
	// hooks are the hooks this sync runs, in the order Git lists them.
	hooks []hookObject
	// idle are the hooks of the revision that this sync does not run (the
	// delete hooks while the App lives, the others while it is deleted;
	// Helm's install hooks on an upgrade and its upgrade hooks on the
	// install): they count in the content, and in where a hook may go.
	idle []hookObject
	// hookIDs are every named hook of the revision, run or not: none is
	// pruned, though an older plumb applied hooks as ordinary objects.
	hookIDs map[objectID]bool
	// install says the sync is the App's first (Helm's pre-install).
	install bool
	// deleteHooks says the revision has PreDelete or PostDelete hooks,
	// which only the App's finalizer runs.
	deleteHooks bool
	// content is a digest of what a sync of the revision applies
	// (SyncStatus.Content).
	content string
}

// contentOf digests what a sync applies: each desired object's content
// hash (prepare stamped it) and wave, and each hook as rendered.
func contentOf(desired []*unstructured.Unstructured, order *ordering) (string, error) {
	parts := make([]string, 0, len(desired)+len(order.hooks))
	for _, d := range desired {
		id := idOf(d)
		parts = append(parts, fmt.Sprintf("o\x00%s\x00%s\x00%s\x00%s\x00%s\x00%d", id.Group, id.Kind, id.Namespace, id.Name,
			d.GetAnnotations()[plumbv1.AnnotationContentHash], order.waves[id]))
	}
	sort.Strings(parts) // the objects' order in Git is no change
	// Every hook, run now or not, in Git's order: the content is the same
	// on the install and after it, and while the App lives and when it is
	// deleted.
	hooks := slices.Concat(order.hooks, order.idle)
	slices.SortFunc(hooks, func(a, b hookObject) int { return a.index - b.index })
	for _, h := range hooks {
		hash, err := diff.Hash(h.obj)
		if err != nil {
			return "", err
		}
		// Its annotations, in the hash, give its place; the phases alone
		// also depend on whether the sync is the install.
		parts = append(parts, "h\x00"+hash)
	}
	sum := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(sum, "%d:%s", len(p), p)
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// hookObject is a hook of the revision: its object, with its namespace
// and plumb's labels set, and its place.
type hookObject struct {
	obj   *unstructured.Unstructured
	place syncorder.Placement
	// index is its place among the hooks, in the order Git lists them.
	index int
}

// ordered says the revision needs an ordered sync: a hook, or objects in
// more than one wave.
func (o *ordering) ordered() bool {
	if o == nil {
		return false
	}
	if len(o.hooks) > 0 {
		return true
	}
	first, seen := 0, false
	for _, w := range o.waves {
		if seen && w != first {
			return true
		}
		first, seen = w, true
	}
	return false
}

// hookObjects are the objects of every hook of the revision, run now or
// not.
func (o *ordering) hookObjects() []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(o.hooks)+len(o.idle))
	for _, h := range slices.Concat(o.hooks, o.idle) {
		out = append(out, h.obj)
	}
	return out
}

// waveOf is an ordinary object's wave.
func (o *ordering) waveOf(obj *unstructured.Unstructured) int {
	if o == nil {
		return 0
	}
	return o.waves[idOf(obj)]
}

// syncPollInterval is how soon a waiting sync looks again when no event
// of its objects or hooks comes: a safety net, not its pace.
const syncPollInterval = 15 * time.Second

// applyOrdered runs the Apply phase of an ordered revision. A sync is of
// a content (the objects, hooks and waves as rendered), whatever the
// revision that rendered them: the one under way goes on; one that
// succeeded has its drift healed as an unordered revision's is (no hook
// runs for a heal); one that failed is not tried again until a sync
// request. Another content starts a new sync once the running hooks of the
// sync before it ended (a migration is never cut short, nor run twice at
// once), unless the plan changes nothing after a sync that succeeded:
// then it is recorded as synced, and no hook runs.
func (s *pass) applyOrdered(ctx context.Context, changes *fluxssa.ChangeSet, log *zap.Logger) error {
	app := s.app
	sync := app.Status.Sync
	same := s.sameSync(sync)
	retry := same && sync.Phase == plumbv1.SyncPhaseFailed && s.syncRequested
	switch {
	case same && !sync.Done():
		sync.Revision = s.revision
		return s.runSync(ctx, sync, changes, log)
	case same && sync.Phase == plumbv1.SyncPhaseSucceeded:
		sync.Revision = s.revision
		return s.applyAll(ctx, changes, log)
	case same && !retry:
		return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: "SyncFailed",
			Err: fmt.Errorf("the sync of revision %s failed: %s (a new revision or `plumb sync` syncs again)", sync.Revision, sync.Failure)}
	}
	if waiting, err := s.letHooksEnd(ctx, sync); err != nil || waiting != "" {
		s.syncWaiting = waiting
		return err
	}
	now := metav1.NewTime(s.r.now())
	next := &plumbv1.SyncStatus{Revision: s.revision, Content: s.order.content, Phase: plumbv1.SyncPhasePreSync, Install: s.order.install, StartedAt: now}
	if !s.changesAnything() && !retry && (sync == nil || sync.Phase == plumbv1.SyncPhaseSucceeded) {
		next.Phase, next.FinishedAt, next.Message = plumbv1.SyncPhaseSucceeded, &now, "nothing to change: no hook ran"
		app.Status.Sync = next
		if len(s.planned.apply) > 0 { // objects that only gain the slot label
			return s.applyAll(ctx, changes, log)
		}
		return nil
	}
	app.Status.Sync = next
	s.r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonSyncStarted, "ordered sync of revision %s started", s.revision)
	return s.runSync(ctx, next, changes, log)
}

// sameSync says sync is of the content this tick read.
func (s *pass) sameSync(sync *plumbv1.SyncStatus) bool {
	return sync != nil && s.order != nil && sync.Content == s.order.content
}

// letHooksEnd reads the hooks still running of a sync that a new one (or
// an unordered revision) replaces, and says which one it waits for. A
// hook that cannot be read, or that runs past the App's timeout, is
// given up (and a timed-out one deleted) rather than waited for ever.
func (s *pass) letHooksEnd(ctx context.Context, sync *plumbv1.SyncStatus) (string, error) {
	if sync == nil || sync.Done() {
		return "", nil
	}
	for i := range sync.Hooks {
		st := &sync.Hooks[i]
		if st.Status != plumbv1.HookRunning {
			continue
		}
		late := s.r.now().Sub(st.StartedAt.Time) > s.hookTimeout()
		gvk := schema.GroupVersionKind{Group: st.Group, Version: st.Version, Kind: st.Kind}
		live, err := s.applier.GetHook(ctx, gvk, st.Namespace, st.Name)
		if err != nil && !late {
			return "", applyFailed(err)
		}
		status, message := hookOutcome(live)
		switch {
		case err != nil:
			status, message = plumbv1.HookFailed, "could not be read: "+err.Error()
		case status == plumbv1.HookRunning && late:
			status, message = plumbv1.HookFailed, fmt.Sprintf("did not end within %s (the App's timeout): deleted", s.hookTimeout())
			if err := s.applier.DeleteHook(ctx, gvk, st.Namespace, st.Name); err != nil {
				return "", applyFailed(err)
			}
		case status == plumbv1.HookRunning:
			sync.Message = fmt.Sprintf("revision %s waits for %s hook %s of revision %s to end", s.revision, st.Phase, hookName(st), sync.Revision)
			return sync.Message, nil
		}
		finished := metav1.NewTime(s.r.now())
		st.Status, st.Message, st.FinishedAt = status, truncate(message, 512), &finished
		s.r.metrics().ObserveHook(st.Phase, status, finished.Sub(st.StartedAt.Time))
	}
	return "", nil
}

// runsHooks says this tick's Apply phase may run hooks: a sync of the
// content is under way, or starts.
func (s *pass) runsHooks() bool {
	if !s.order.ordered() || len(s.order.hooks) == 0 {
		return false
	}
	sync := s.app.Status.Sync
	switch same := s.sameSync(sync); {
	case same && !sync.Done():
		return true
	case same && sync.Phase == plumbv1.SyncPhaseFailed:
		return s.syncRequested
	case same:
		return false
	case sync == nil || sync.Phase == plumbv1.SyncPhaseSucceeded:
		return s.changesAnything()
	}
	return true
}

// changesAnything says the plan applies or prunes something: an object
// that left Git and that the last tick found kept is no change, nor is one
// that only gains the slot label.
func (s *pass) changesAnything() bool {
	for _, obj := range s.planned.apply {
		if !s.planned.relabelled[idOf(obj)] {
			return true
		}
	}
	if !s.app.Spec.PruneEnabled() {
		return false
	}
	kept := map[objectID]bool{}
	for _, k := range s.app.Status.Kept {
		kept[idOfRef(k.ObjectRef)] = true
	}
	for _, obj := range s.stale() {
		if !kept[idOf(obj)] {
			return true
		}
	}
	return false
}

// runSync goes on with the sync from its phase, as far as it can without
// waiting. It ends the tick with the sync waiting (s.syncWaiting), done,
// or failed (an error naming what failed). A refusal of the API server
// (an object it finds invalid or forbidden) fails the sync as a failed
// hook does; any other error (the API server unreachable) ends the tick
// with the sync where it was, to go on at the retry.
func (s *pass) runSync(ctx context.Context, sync *plumbv1.SyncStatus, changes *fluxssa.ChangeSet, log *zap.Logger) error {
	for range 8 { // each round moves to a later phase; SyncFail is the last
		var (
			waiting, failed string
			err             error
		)
		switch sync.Phase {
		case plumbv1.SyncPhasePreSync:
			waiting, failed, err = s.runHooks(ctx, sync, syncorder.PreSync, log)
		case plumbv1.SyncPhaseSync:
			waiting, failed, err = s.runWaves(ctx, sync, changes, log)
		case plumbv1.SyncPhasePostSync:
			waiting, failed, err = s.runHooks(ctx, sync, syncorder.PostSync, log)
		case plumbv1.SyncPhaseSyncFail:
			waiting, failed, err = s.runHooks(ctx, sync, syncorder.SyncFail, log)
		default:
			return nil
		}
		if err != nil {
			if !refused(err) || sync.Phase == plumbv1.SyncPhaseSyncFail {
				return err
			}
			failed = err.Error()
		}
		if waiting != "" {
			sync.Message = truncate(waiting, 1024)
			s.syncWaiting = waiting
			return nil
		}
		if failed != "" && sync.Phase != plumbv1.SyncPhaseSyncFail {
			sync.Failure = truncate(failed, 1024)
			sync.Wave, sync.WaitingSince = nil, nil
			s.r.Events.Eventf(s.app, corev1.EventTypeWarning, plumbv1.ReasonSyncFailed, "revision %s: %s", sync.Revision, truncate(failed, 1000))
			sync.Phase = plumbv1.SyncPhaseSyncFail
			continue
		}
		sync.Wave, sync.WaitingSince = nil, nil
		switch sync.Phase {
		case plumbv1.SyncPhasePreSync:
			sync.Phase = plumbv1.SyncPhaseSync
		case plumbv1.SyncPhaseSync:
			sync.Phase = plumbv1.SyncPhasePostSync
		case plumbv1.SyncPhasePostSync:
			s.endSync(sync, plumbv1.SyncPhaseSucceeded, "")
			return nil
		case plumbv1.SyncPhaseSyncFail:
			s.endSync(sync, plumbv1.SyncPhaseFailed, failed)
			return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: "SyncFailed",
				Err: fmt.Errorf("the sync of revision %s failed: %s", sync.Revision, sync.Failure)}
		}
	}
	return nil
}

// refused says the API server refused a write for good (the object is
// invalid, forbidden, or conflicts), as opposed to not answering.
func refused(err error) bool {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) {
		return true
	}
	// An admission webhook's or policy's denial; not an exceeded quota or
	// a namespace being deleted, which pass.
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied")
}

// endSync records how the sync ended. A SyncFail hook's own failure is
// added to the failure that ran it.
func (s *pass) endSync(sync *plumbv1.SyncStatus, phase, syncFailHook string) {
	now := metav1.NewTime(s.r.now())
	sync.Phase, sync.FinishedAt = phase, &now
	sync.Wave, sync.WaitingSince = nil, nil
	if syncFailHook != "" {
		sync.Failure = truncate(sync.Failure+"; then "+syncFailHook, 1024)
	}
	sync.Message = ""
	if phase == plumbv1.SyncPhaseSucceeded {
		s.r.Events.Eventf(s.app, corev1.EventTypeNormal, plumbv1.ReasonSyncSucceeded, "ordered sync of revision %s succeeded", sync.Revision)
	}
}

// waves are the waves of a phase's hooks (and, for Sync, of the ordinary
// objects), lowest first.
func (s *pass) waves(phase syncorder.Phase) []int {
	var out []int
	add := func(w int) {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	for _, h := range s.order.hooks {
		if h.place.In(phase) {
			add(h.place.Wave)
		}
	}
	if phase == syncorder.Sync {
		for _, d := range s.desired {
			add(s.order.waveOf(d))
		}
	}
	sort.Ints(out)
	return out
}

// runHooks runs a phase's hooks wave by wave: a wave's hooks are created
// together, and the next wave starts once they all succeeded.
func (s *pass) runHooks(ctx context.Context, sync *plumbv1.SyncStatus, phase syncorder.Phase, log *zap.Logger) (waiting, failed string, err error) {
	for _, w := range s.waves(phase) {
		wave := int32(w)
		sync.Wave = &wave
		if waiting, failed, err = s.runHookWave(ctx, sync, phase, w, log); waiting != "" || failed != "" || err != nil {
			return waiting, failed, err
		}
	}
	return "", "", nil
}

// runHookWave starts the hooks of one wave of a phase that have not run,
// and reads those running: waiting names the first still running, failed
// the first that failed.
func (s *pass) runHookWave(ctx context.Context, sync *plumbv1.SyncStatus, phase syncorder.Phase, wave int, log *zap.Logger) (waiting, failed string, err error) {
	for _, h := range s.order.hooks {
		if !h.place.In(phase) || h.place.Wave != wave {
			continue
		}
		st, wait, err := s.stepHook(ctx, sync, h, phase, log)
		if err != nil {
			return "", "", err
		}
		switch {
		case wait != "":
			if waiting == "" {
				waiting = wait
			}
		case st.Status == plumbv1.HookFailed:
			if failed == "" {
				failed = fmt.Sprintf("%s hook %s failed: %s", phase, hookName(st), st.Message)
			}
		case st.Status == plumbv1.HookRunning && waiting == "":
			waiting = fmt.Sprintf("%s hook %s is running", phase, hookName(st))
			if st.Message != "" {
				waiting += ": " + st.Message
			}
		}
	}
	if failed != "" {
		return "", failed, nil
	}
	return waiting, "", nil
}

// hookTimeout is how long a hook may run: the App's timeout, as a tick
// may (Argo CD waits for ever).
func (s *pass) hookTimeout() time.Duration { return s.app.Spec.TimeoutOrDefault() }

// stepHook moves one hook on: it creates a hook that has not run in this
// sync, reads one that runs, and deletes one that ended by its delete
// policy. A named hook is made only where no object of that name is, or
// where the App's own hook of that name is (with BeforeHookCreation, that
// last run is deleted first and waited for): it never takes over, nor
// deletes, an object of another App or of someone else. wait says what
// it waits for before it can be created.
func (s *pass) stepHook(ctx context.Context, sync *plumbv1.SyncStatus, h hookObject, phase syncorder.Phase, log *zap.Logger) (*plumbv1.HookStatus, string, error) {
	now := s.r.now()
	st := s.findHook(sync, h, phase)
	if st == nil {
		if name := h.obj.GetName(); name != "" {
			gvk := h.obj.GroupVersionKind()
			live, err := s.applier.GetHook(ctx, gvk, h.obj.GetNamespace(), name)
			if err != nil {
				return nil, "", applyFailed(err)
			}
			owner := ssa.Owner{Name: s.app.Name, Namespace: s.app.Namespace}
			switch {
			case live != nil && !owner.Owns(live):
				return s.failHook(sync, h, phase, fmt.Sprintf("%s %s/%s exists and is not this App's: rename the hook, or remove that object", gvk.Kind, h.obj.GetNamespace(), name)), "", nil
			case live != nil:
				// The App's own last run of it (or an object an older plumb
				// applied under its name): deleted first, whatever the
				// delete policy, so that the hook runs anew (Argo CD
				// applies over it, and takes its old outcome for the new).
				if sync.WaitingSince == nil {
					since := metav1.NewTime(now)
					sync.WaitingSince = &since
				} else if now.Sub(sync.WaitingSince.Time) > s.hookTimeout() {
					return s.failHook(sync, h, phase, fmt.Sprintf("its last run was not deleted within %s", s.hookTimeout())), "", nil
				}
				if live.GetDeletionTimestamp() == nil {
					if err := s.applier.DeleteHook(ctx, gvk, h.obj.GetNamespace(), name); err != nil {
						return nil, "", applyFailed(err)
					}
				}
				return nil, fmt.Sprintf("%s hook %s %s/%s: its last run is being deleted before it is created again", phase, gvk.Kind, h.obj.GetNamespace(), name), nil
			}
		}
		sync.WaitingSince = nil
		created, err := s.applier.CreateHook(ctx, h.obj)
		if err != nil {
			err = redactedFor(err, h.obj) // a policy's message may quote a Secret hook
			if !refused(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil, "", applyFailed(err)
			}
			return s.failHook(sync, h, phase, err.Error()), "", nil
		}
		sync.Hooks = append(sync.Hooks, plumbv1.HookStatus{ObjectRef: refOf(created), GenerateName: h.obj.GetGenerateName(), Phase: string(phase),
			Wave: int32(h.place.Wave), Status: plumbv1.HookRunning, StartedAt: metav1.NewTime(now)})
		st = &sync.Hooks[len(sync.Hooks)-1]
		log.Info("Created hook", zap.String("hook", hookName(st)), zap.String("syncPhase", string(phase)), zap.Int("wave", h.place.Wave))
		if isPassive(created) {
			s.endHook(ctx, st, h, plumbv1.HookSucceeded, "")
			return st, "", nil
		}
	}
	if st.Status != plumbv1.HookRunning {
		return st, "", nil
	}
	live, err := s.applier.GetHook(ctx, h.obj.GroupVersionKind(), st.Namespace, st.Name)
	if err != nil {
		return nil, "", applyFailed(err)
	}
	status, message := hookOutcome(live)
	if status == plumbv1.HookRunning && now.Sub(st.StartedAt.Time) > s.hookTimeout() {
		// Stopped, not left running beside a later sync's run of it.
		status, message = plumbv1.HookFailed, fmt.Sprintf("did not end within %s (the App's timeout): deleted", s.hookTimeout())
		if err := s.applier.DeleteHook(ctx, h.obj.GroupVersionKind(), st.Namespace, st.Name); err != nil {
			return nil, "", applyFailed(err)
		}
	}
	st.Message = truncate(message, 512)
	if status != plumbv1.HookRunning {
		s.endHook(ctx, st, h, status, message)
	}
	return st, "", nil
}

// failHook records a hook that could not be created as failed.
func (s *pass) failHook(sync *plumbv1.SyncStatus, h hookObject, phase syncorder.Phase, message string) *plumbv1.HookStatus {
	now := metav1.NewTime(s.r.now())
	sync.WaitingSince = nil
	sync.Hooks = append(sync.Hooks, plumbv1.HookStatus{ObjectRef: refOf(h.obj), GenerateName: h.obj.GetGenerateName(), Phase: string(phase),
		Wave: int32(h.place.Wave), Status: plumbv1.HookFailed, Message: truncate(message, 512), StartedAt: now, FinishedAt: &now})
	st := &sync.Hooks[len(sync.Hooks)-1]
	if st.Name == "" {
		st.Name = h.obj.GetGenerateName() + "*"
	}
	s.r.metrics().ObserveHook(st.Phase, plumbv1.HookFailed, 0)
	return st
}

// endHook records how a hook ended and deletes it if its delete policy
// says so.
func (s *pass) endHook(ctx context.Context, st *plumbv1.HookStatus, h hookObject, status, message string) {
	finished := metav1.NewTime(s.r.now())
	st.Status, st.Message, st.FinishedAt = status, truncate(message, 512), &finished
	if status == plumbv1.HookSucceeded && h.place.Has(syncorder.HookSucceeded) || status == plumbv1.HookFailed && h.place.Has(syncorder.HookFailed) {
		if err := s.applier.DeleteHook(ctx, h.obj.GroupVersionKind(), st.Namespace, st.Name); err != nil {
			s.log.Warn("Could not delete hook", zap.String("hook", hookName(st)), zap.Error(err))
		}
	}
	s.r.metrics().ObserveHook(st.Phase, status, finished.Sub(st.StartedAt.Time))
}

// findHook is the status of h in phase p of this sync, if it ran. Hooks
// of one kind, namespace and generateName are told apart by the order the
// phase runs them (wave, then Git's order), which is the order of their
// runs in the status.
func (s *pass) findHook(sync *plumbv1.SyncStatus, h hookObject, phase syncorder.Phase) *plumbv1.HookStatus {
	gvk := h.obj.GroupVersionKind()
	ordinal := 0
	if h.obj.GetName() == "" {
		for _, other := range s.order.hooks {
			if other.obj.GetName() == "" && other.obj.GetGenerateName() == h.obj.GetGenerateName() && idOf(other.obj) == idOf(h.obj) &&
				other.place.In(phase) && (other.place.Wave < h.place.Wave || other.place.Wave == h.place.Wave && other.index < h.index) {
				ordinal++
			}
		}
	}
	seen := 0
	for i := range sync.Hooks {
		st := &sync.Hooks[i]
		if st.Phase != string(phase) || st.Kind != gvk.Kind || st.Group != gvk.Group || st.Namespace != h.obj.GetNamespace() {
			continue
		}
		switch name := h.obj.GetName(); {
		case name != "" && st.Name == name && st.GenerateName == "":
			return st
		case name == "" && st.GenerateName == h.obj.GetGenerateName():
			if seen == ordinal {
				return st
			}
			seen++
		}
	}
	return nil
}

// hookName names a hook as created.
func hookName(st *plumbv1.HookStatus) string {
	if st.Namespace == "" {
		return st.Kind + "/" + st.Name
	}
	return st.Kind + "/" + st.Namespace + "/" + st.Name
}

// isPassive says a hook has no completion of its own to wait for: not a
// Job or a Pod (Argo CD takes such a hook as done once it exists).
func isPassive(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return !(gvk.Group == "batch" && gvk.Kind == "Job") && !(gvk.Group == "" && gvk.Kind == "Pod")
}

// hookOutcome reads whether a hook ended: a Job by its Complete or Failed
// condition, a Pod by its phase. A hook deleted under it failed.
func hookOutcome(live *unstructured.Unstructured) (status, message string) {
	if live == nil {
		return plumbv1.HookFailed, "deleted before it ended"
	}
	if live.GetKind() == "Pod" {
		phase, _, _ := unstructured.NestedString(live.Object, "status", "phase")
		switch phase {
		case string(corev1.PodSucceeded):
			return plumbv1.HookSucceeded, ""
		case string(corev1.PodFailed):
			reason, _, _ := unstructured.NestedString(live.Object, "status", "reason")
			msg, _, _ := unstructured.NestedString(live.Object, "status", "message")
			return plumbv1.HookFailed, strings.TrimSpace("the Pod failed " + reason + " " + msg)
		}
		return plumbv1.HookRunning, "Pod " + strings.ToLower(phase)
	}
	conditions, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if cond["status"] != "True" {
			continue
		}
		switch cond["type"] {
		case "Complete":
			return plumbv1.HookSucceeded, ""
		case "Failed":
			reason, _ := cond["reason"].(string)
			msg, _ := cond["message"].(string)
			return plumbv1.HookFailed, strings.TrimSpace("the Job failed: " + reason + " " + msg)
		}
	}
	return plumbv1.HookRunning, ""
}

// runWaves applies the ordinary objects (and runs the Sync hooks) wave by
// wave: a wave's changed objects are applied, and the next wave waits
// until its objects are healthy (kstatus, from the cache) and its hooks
// done; a wave unhealthy past the App's healthTimeout fails the sync.
// After the last wave, what left Git is pruned, higher waves first.
func (s *pass) runWaves(ctx context.Context, sync *plumbv1.SyncStatus, changes *fluxssa.ChangeSet, log *zap.Logger) (waiting, failed string, err error) {
	for _, w := range s.waves(syncorder.Sync) {
		wave := int32(w)
		if sync.Wave == nil || *sync.Wave < wave {
			// A wave met for the first time: the wait (if any) is its own.
			sync.Wave, sync.WaitingSince = &wave, nil
		}
		var batch []*unstructured.Unstructured
		for _, obj := range s.planned.apply {
			if s.order.waveOf(obj) == w {
				batch = append(batch, obj)
			}
		}
		if err := s.applyObjects(ctx, changes, batch, log); err != nil {
			return "", "", err
		}
		if len(batch) > 0 {
			// In the inventory from now on: a sync that fails or is
			// replaced before its end leaves nothing that no prune, nor the
			// finalizer, would find.
			setInventory(s.app, mergeRefs(s.app.Status.Inventory, refsOf(batch)), s.r.appliedFields(s.key, s.desired), s.inventoryWave)
		}
		if waiting, failed, err = s.runHookWave(ctx, sync, syncorder.Sync, w, log); failed != "" || err != nil {
			return "", failed, err
		}
		if waiting == "" {
			waiting, failed = s.waveHealth(ctx, w)
		}
		if failed != "" {
			return "", fmt.Sprintf("wave %d: %s", w, failed), nil
		}
		if waiting != "" {
			now := s.r.now()
			if *sync.Wave != wave || sync.WaitingSince == nil {
				// An earlier wave waits again (one of its objects
				// drifted): its wait starts now.
				since := metav1.NewTime(now)
				sync.Wave, sync.WaitingSince = &wave, &since
			}
			if timeout := s.app.Spec.HealthTimeoutOrDefault(); now.Sub(sync.WaitingSince.Time) > timeout {
				return "", fmt.Sprintf("wave %d was not healthy within %s (healthTimeout): %s", w, timeout, waiting), nil
			}
			return fmt.Sprintf("wave %d: %s", w, waiting), "", nil
		}
	}
	if err := s.removeAdditions(ctx, changes); err != nil {
		return "", "", err
	}
	kept, err := s.prune(ctx, changes, log)
	if err != nil {
		return "", "", err
	}
	s.recordApplied(kept)
	return "", "", nil
}

// waveHealth judges the health of a wave's ordinary objects: waiting names
// the first not healthy yet, failed the first that failed.
func (s *pass) waveHealth(ctx context.Context, wave int) (waiting, failed string) {
	for _, obj := range s.desired {
		if s.order.waveOf(obj) != wave {
			continue
		}
		result := s.r.objectHealth(ctx, s.target, s.key, refOf(obj))
		switch result.Status {
		case health.Current:
		case health.Failed:
			return "", fmt.Sprintf("%s failed: %s", idOf(obj), result.Message)
		default:
			if waiting == "" {
				waiting = fmt.Sprintf("%s is %s", idOf(obj), result.Status)
				if result.Message != "" {
					waiting += ": " + result.Message
				}
			}
		}
	}
	return waiting, ""
}

// syncUnderWay says an ordered sync of the App waits to go on.
func syncUnderWay(app *plumbv1.App) bool {
	return app.Status.Sync != nil && !app.Status.Sync.Done()
}

// reportSyncUnderWay makes Ready and Reconciling say what the sync under
// way waits for: the revision is not applied until it ends.
func (r *Reconciler) reportSyncUnderWay(app *plumbv1.App) {
	sync := app.Status.Sync
	message := fmt.Sprintf("syncing revision %s, phase %s: %s", sync.Revision, sync.Phase, sync.Message)
	now := r.now()
	setConditionStatus(app, plumbv1.ConditionReady, metav1.ConditionUnknown, plumbv1.ReasonProgressing, message, now)
	setCondition(app, plumbv1.ConditionReconciling, true, plumbv1.ReasonProgressing, message, now)
}

// applyFailed is an error of the Apply phase.
func applyFailed(err error) error {
	return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Err: err}
}
