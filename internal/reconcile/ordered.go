package reconcile

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/health"
	"github.com/plumb-dev/plumb/internal/syncorder"
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

// ordering is the placement of a revision's objects.
type ordering struct {
	// waves of the ordinary objects, by ID (absent: wave 0).
	waves map[objectID]int
	// hooks are the revision's hooks, in the order Git lists them.
	hooks []hookObject
	// install says the sync is the App's first (Helm's pre-install).
	install bool
}

// hookObject is a hook of the revision: its object, with its namespace
// and plumb's labels set, and its place.
type hookObject struct {
	obj   *unstructured.Unstructured
	place syncorder.Placement
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

// applyOrdered runs the Apply phase of an ordered revision: it starts a
// sync of the revision when the plan changes something and no sync of it
// ran, goes on with the one under way, and heals a revision whose sync
// succeeded as an unordered one is (no hook runs for a heal). A sync that
// failed is not tried again until a new revision or a sync request.
func (s *pass) applyOrdered(ctx context.Context, changes *fluxssa.ChangeSet, log *zap.Logger) error {
	app := s.app
	sync := app.Status.Sync
	switch {
	case sync == nil || sync.Revision != s.revision || (sync.Phase == plumbv1.SyncPhaseFailed && s.syncRequested):
		if !s.changesAnything() {
			return nil
		}
		sync = &plumbv1.SyncStatus{Revision: s.revision, Phase: plumbv1.SyncPhasePreSync, Install: s.order.install, StartedAt: metav1.NewTime(s.r.now())}
		app.Status.Sync = sync
		s.r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonSyncStarted, "ordered sync of revision %s started", s.revision)
	case sync.Phase == plumbv1.SyncPhaseSucceeded:
		return s.applyAll(ctx, changes, log)
	case sync.Phase == plumbv1.SyncPhaseFailed:
		return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: "SyncFailed",
			Err: fmt.Errorf("the sync of revision %s failed: %s (a new revision or `plumb sync` syncs again)", sync.Revision, sync.Message)}
	}
	return s.runSync(ctx, sync, changes, log)
}

// runsHooks says this tick's Apply phase may run hooks: a sync of the
// revision is under way, or starts.
func (s *pass) runsHooks() bool {
	if !s.order.ordered() || len(s.order.hooks) == 0 {
		return false
	}
	sync := s.app.Status.Sync
	switch {
	case sync != nil && sync.Revision == s.revision && !sync.Done():
		return true
	case sync == nil || sync.Revision != s.revision || sync.Phase == plumbv1.SyncPhaseFailed && s.syncRequested:
		return s.changesAnything()
	}
	return false
}

// changesAnything says the plan applies or prunes something.
func (s *pass) changesAnything() bool {
	if len(s.planned.apply) > 0 {
		return true
	}
	return s.app.Spec.PruneEnabled() && len(s.r.staleObjects(s.app.Status.Inventory, s.desired, s.kinds)) > 0
}

// runSync goes on with the sync from its phase, as far as it can without
// waiting. It ends the tick with the sync waiting (s.syncWaiting), done,
// or failed (an error naming what failed).
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
			return err
		}
		if waiting != "" {
			sync.Message = waiting
			s.syncWaiting = waiting
			return nil
		}
		if failed != "" && sync.Phase != plumbv1.SyncPhaseSyncFail {
			sync.Message = failed
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
				Err: fmt.Errorf("the sync of revision %s failed: %s", sync.Revision, sync.Message)}
		}
	}
	return nil
}

// endSync records how the sync ended. A SyncFail hook's own failure is
// added to the failure that ran it.
func (s *pass) endSync(sync *plumbv1.SyncStatus, phase, syncFailHook string) {
	now := metav1.NewTime(s.r.now())
	sync.Phase, sync.FinishedAt = phase, &now
	sync.Wave, sync.WaitingSince = nil, nil
	if syncFailHook != "" {
		sync.Message = truncate(sync.Message+"; then "+syncFailHook, 1024)
	}
	if phase == plumbv1.SyncPhaseSucceeded {
		sync.Message = ""
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
// sync (a named one with BeforeHookCreation after its last run is gone),
// reads one that runs, and deletes one that ended by its delete policy.
// wait says what it waits for before it can be created.
func (s *pass) stepHook(ctx context.Context, sync *plumbv1.SyncStatus, h hookObject, phase syncorder.Phase, log *zap.Logger) (*plumbv1.HookStatus, string, error) {
	now := s.r.now()
	st := findHook(sync, h, phase)
	if st == nil {
		gvk := h.obj.GroupVersionKind()
		if name := h.obj.GetName(); name != "" && h.place.Has(syncorder.BeforeHookCreation) {
			live, err := s.applier.GetHook(ctx, gvk, h.obj.GetNamespace(), name)
			if err != nil {
				return nil, "", applyFailed(err)
			}
			if live != nil {
				if live.GetDeletionTimestamp() == nil {
					if err := s.applier.DeleteHook(ctx, gvk, h.obj.GetNamespace(), name); err != nil {
						return nil, "", applyFailed(err)
					}
				}
				return nil, fmt.Sprintf("%s hook %s %s/%s: its last run is being deleted before it is created again", phase, gvk.Kind, h.obj.GetNamespace(), name), nil
			}
		}
		created, err := s.applier.CreateHook(ctx, h.obj)
		hook := plumbv1.HookStatus{ObjectRef: refOf(h.obj), GenerateName: h.obj.GetGenerateName(), Phase: string(phase),
			Wave: int32(h.place.Wave), Status: plumbv1.HookRunning, StartedAt: metav1.NewTime(now)}
		if err != nil {
			finished := metav1.NewTime(now)
			hook.Status, hook.Message, hook.FinishedAt = plumbv1.HookFailed, truncate(err.Error(), 512), &finished
			sync.Hooks = append(sync.Hooks, hook)
			return &sync.Hooks[len(sync.Hooks)-1], "", nil
		}
		hook.ObjectRef = refOf(created)
		sync.Hooks = append(sync.Hooks, hook)
		log.Info("Created hook", zap.String("hook", hookName(&hook)), zap.String("syncPhase", string(phase)), zap.Int("wave", h.place.Wave))
		st = &sync.Hooks[len(sync.Hooks)-1]
		if isPassive(created) {
			s.endHook(ctx, st, h, plumbv1.HookSucceeded, "")
			return st, "", nil
		}
	}
	if st.Status != plumbv1.HookRunning {
		return st, "", nil
	}
	gvk := h.obj.GroupVersionKind()
	live, err := s.applier.GetHook(ctx, gvk, st.Namespace, st.Name)
	if err != nil {
		return nil, "", applyFailed(err)
	}
	status, message := hookOutcome(live)
	if status == plumbv1.HookRunning && now.Sub(st.StartedAt.Time) > s.hookTimeout() {
		status, message = plumbv1.HookFailed, fmt.Sprintf("did not end within %s (the App's timeout)", s.hookTimeout())
	}
	st.Message = truncate(message, 512)
	if status != plumbv1.HookRunning {
		s.endHook(ctx, st, h, status, message)
	}
	return st, "", nil
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

// findHook is the status of h in phase p of this sync, if it ran.
func findHook(sync *plumbv1.SyncStatus, h hookObject, phase syncorder.Phase) *plumbv1.HookStatus {
	gvk := h.obj.GroupVersionKind()
	for i := range sync.Hooks {
		st := &sync.Hooks[i]
		if st.Phase != string(phase) || st.Kind != gvk.Kind || st.Group != gvk.Group || st.Namespace != h.obj.GetNamespace() {
			continue
		}
		if name := h.obj.GetName(); name != "" && st.Name == name && st.GenerateName == "" ||
			name == "" && st.GenerateName == h.obj.GetGenerateName() {
			return st
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
		if sync.Wave == nil || *sync.Wave != wave {
			sync.WaitingSince = nil
		}
		sync.Wave = &wave
		var batch []*unstructured.Unstructured
		for _, obj := range s.planned.apply {
			if s.order.waveOf(obj) == w {
				batch = append(batch, obj)
			}
		}
		if err := s.applyObjects(ctx, changes, batch, log); err != nil {
			return "", "", err
		}
		if waiting, failed, err = s.runHookWave(ctx, sync, syncorder.Sync, w, log); failed != "" || err != nil {
			return "", failed, err
		}
		if waiting == "" {
			waiting, failed = s.waveHealth(w)
		}
		if failed != "" {
			return "", fmt.Sprintf("wave %d: %s", w, failed), nil
		}
		if waiting != "" {
			now := s.r.now()
			if sync.WaitingSince == nil {
				since := metav1.NewTime(now)
				sync.WaitingSince = &since
			}
			if timeout := s.app.Spec.HealthTimeoutOrDefault(); now.Sub(sync.WaitingSince.Time) > timeout {
				return "", fmt.Sprintf("wave %d was not healthy within %s (healthTimeout): %s", w, timeout, waiting), nil
			}
			return fmt.Sprintf("wave %d: %s", w, waiting), "", nil
		}
		sync.WaitingSince = nil
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
func (s *pass) waveHealth(wave int) (waiting, failed string) {
	for _, obj := range s.desired {
		if s.order.waveOf(obj) != wave {
			continue
		}
		result := s.r.objectHealth(s.key, refOf(obj))
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
