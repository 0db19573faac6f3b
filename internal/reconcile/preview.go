package reconcile

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/diff"
	"github.com/plumb-dev/plumb/internal/redact"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/syncorder"
	"github.com/plumb-dev/plumb/ssa"
)

// Preview is what the next tick of an App would do, found by the tick's
// own Read, Observe and Diff, without its Apply: `plumb diff` and the
// dashboard show it. Secret values are masked in every object it holds.
type Preview struct {
	// Revision is the revision read (source.LocalRevision for a working
	// copy).
	Revision string
	// Suspended says the App is suspended: no tick applies anything until
	// it is resumed.
	Suspended bool
	// Waiting says why a tick would not apply yet (its dependsOn: the
	// reason and message the App's Ready would have), "" when it would.
	Waiting string
	// Objects are the objects the App renders and those that left Git
	// that a prune would delete or the prune guard keeps, by kind,
	// namespace and name.
	Objects []PreviewObject
	// Hooks are the hooks the next tick's ordered sync would run (those of
	// a sync under way that have not run yet), in the order it runs them.
	Hooks []PreviewHook
	// Destination and Server name the cluster the App deploys into (its
	// kubeconfig Secret, its API server), empty for plumb's own.
	Destination, Server string
}

// PreviewHook is a hook an ordered sync would run.
type PreviewHook struct {
	Phase string
	Wave  int
	plumbv1.ObjectRef
	// GenerateName is the hook's generateName, when it has no name.
	GenerateName string
}

// PreviewAction is what the next tick would do to one object.
type PreviewAction string

// The actions of a preview.
const (
	PreviewCreate    PreviewAction = "create"
	PreviewUpdate    PreviewAction = "update"
	PreviewDrift     PreviewAction = "drift" // someone else changed (or deleted) it
	PreviewPrune     PreviewAction = "prune"
	PreviewKeep      PreviewAction = "keep" // left Git, kept by the prune guard
	PreviewUnchanged PreviewAction = "unchanged"
)

// PreviewObject is one object of a Preview.
type PreviewObject struct {
	plumbv1.ObjectRef
	Action PreviewAction
	// Live is the object as it is now, whole (nil when it does not exist,
	// and for an unchanged object, which is not read whole).
	Live *unstructured.Unstructured
	// Next is what the apply would make of it, as the API server's
	// server-side dry-run answered (the rendered object itself when its
	// kind comes with the same apply); nil for an object pruned, kept or
	// unchanged.
	Next *unstructured.Unstructured
	// Drift is, for an object someone else changed, which fields, their
	// values (masked for Secrets) and who changed them; Deleted says
	// someone deleted it; Left says the tick would leave it so (the App's
	// driftPolicy is alert).
	Drift   []diff.Change
	Deleted bool
	Left    bool
	// LeftTo are fields the controller has left to a manager that kept
	// changing them back (DriftConflict): the tick neither applies nor
	// puts them back.
	LeftTo []plumbv1.LeftField
	// Kept says why the prune guard keeps it.
	Kept string
	// Refused is the API server's answer when it refuses the object's
	// dry-run (validation, admission): the Apply phase would fail on it.
	Refused string
}

// Preview runs Read, Observe and Diff for app as a tick would, then asks
// the API server for a server-side dry-run of each object the tick would
// change, to show what it would become, and reads each object a prune
// would delete. It writes nothing: no status, no Event, no object. A
// failed phase is a *PhaseError, as a tick's. The Reconciler for it is
// made for the purpose (see package preview): its memory starts empty,
// so the Diff phase decides as a controller just restarted would.
// app is the caller's copy, which Preview may change.
func (r *Reconciler) Preview(ctx context.Context, app *plumbv1.App) (*Preview, error) {
	log := r.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := r.newPass(app, log, nil)
	if err := s.plan(ctx, func(ctx context.Context, cluster ClusterInfo) (*source.Result, error) {
		return r.read(ctx, app, true, time.Time{}, cluster)
	}); err != nil {
		return nil, err
	}
	// As the Apply phase would, before anything: may the ServiceAccount
	// make every write the tick plans?
	if sa := r.serviceAccountOf(app); sa != "" {
		if err := s.authorize(ctx, sa); err != nil {
			return nil, err
		}
	}
	preview := &Preview{Revision: s.revision, Suspended: app.Spec.Suspend, Waiting: s.waiting, Hooks: s.previewHooks(),
		Destination: s.target.Name, Server: s.target.Server}
	objects, err := s.previewObjects(ctx)
	if err != nil {
		return nil, err
	}
	preview.Objects = objects
	stale, err := r.previewPrune(ctx, s.target, app, s.stale())
	if err != nil {
		return nil, err
	}
	preview.Objects = append(preview.Objects, stale...)
	sort.Slice(preview.Objects, func(i, j int) bool {
		return preview.Objects[i].ObjectRef.String() < preview.Objects[j].ObjectRef.String()
	})
	return preview, nil
}

// previewHooks lists the hooks the next tick's sync would run, phase by
// phase and wave by wave (a sync under way: those not run yet).
func (s *pass) previewHooks() []PreviewHook {
	if !s.runsHooks() {
		return nil
	}
	sync := s.app.Status.Sync
	underWay := s.sameSync(sync) && !sync.Done()
	var out []PreviewHook
	for _, phase := range []syncorder.Phase{syncorder.PreSync, syncorder.Sync, syncorder.PostSync} {
		for _, wave := range s.waves(phase) {
			for _, h := range s.order.hooks {
				if !h.place.In(phase) || h.place.Wave != wave || underWay && s.findHook(sync, h, phase) != nil {
					continue
				}
				out = append(out, PreviewHook{Phase: string(phase), Wave: wave, ObjectRef: refOf(h.obj), GenerateName: h.obj.GetGenerateName()})
			}
		}
	}
	return out
}

// previewObjects says of each desired object what the next tick would do
// with it, with the API server's dry-run of each change.
func (s *pass) previewObjects(ctx context.Context) ([]PreviewObject, error) {
	r, p, desired, live, kinds, applier := s.r, s.planned, s.desired, s.live, s.kinds, s.applier
	var out []PreviewObject
	applies := map[objectID]bool{}
	for _, obj := range p.apply {
		applies[idOf(obj)] = true
	}
	// Objects of a Namespace this apply creates cannot be dry-run (the API
	// server's admission finds no namespace): shown as rendered, as
	// objects of a kind whose CRD comes with the apply are.
	newNamespaces := map[string]bool{}
	for _, obj := range desired {
		if obj.GroupVersionKind().Group == "" && obj.GetKind() == "Namespace" && live[idOf(obj)] == nil {
			newNamespaces[obj.GetName()] = true
		}
	}
	for _, obj := range desired {
		id := idOf(obj)
		o := PreviewObject{ObjectRef: refOf(obj), Action: PreviewUnchanged}
		d, drifted := p.drifted[id]
		for _, c := range p.conflicts[id] {
			o.LeftTo = append(o.LeftTo, plumbv1.LeftField{Path: c.path.String(), Manager: c.manager})
		}
		switch {
		case drifted && (len(d.changes)+len(d.additions) > 0 || d.deleted):
			o.Action, o.Drift, o.Deleted, o.Left = PreviewDrift, d.changes, d.deleted, p.left[id]
		case applies[id] && live[id] == nil:
			o.Action = PreviewCreate
		case applies[id]:
			o.Action = PreviewUpdate
		case len(o.LeftTo) > 0:
			// Only fields left to others differ: nothing to apply or show.
			o.Action, o.Left = PreviewDrift, true
			out = append(out, o)
			continue
		}
		if o.Action != PreviewUnchanged {
			if err := r.previewChange(ctx, s.target, applier, obj, kinds, newNamespaces[obj.GetNamespace()], &o); err != nil {
				return nil, err
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// seedConflicts remembers, as the controller's memory holds them, the
// fields its status says it left to other managers (status.drift's
// leftTo), for each object Git has not changed since plumb last applied
// it (a change in Git ends a conflict): the Diff phase then leaves them
// as the controller's would. Whether the manager still holds each field
// is decided from the live object, as the controller decides it.
func (r *Reconciler) seedConflicts(key types.NamespacedName, app *plumbv1.App, desired []*unstructured.Unstructured, live map[objectID]*compact.Object) {
	if app.Status.Drift == nil {
		return
	}
	byID := map[objectID]*unstructured.Unstructured{}
	for _, obj := range desired {
		byID[idOf(obj)] = obj
	}
	for _, d := range app.Status.Drift.Objects {
		id := idOfRef(d.ObjectRef)
		obj, l := byID[id], live[id]
		if obj == nil || l == nil {
			continue
		}
		hash := annotationOf(obj, plumbv1.AnnotationContentHash)
		if l.Annotation(plumbv1.AnnotationContentHash) != hash {
			continue
		}
		for _, f := range d.LeftTo {
			paths, err := pathsOf(f.Fields)
			if err != nil {
				continue
			}
			for _, path := range paths {
				r.memory.leave(key, id, hash, path, f.Manager)
			}
		}
	}
}

// previewChange reads the object whole and asks for the dry-run of its
// apply. An object the apply would not change after all (another
// manager holds Git's very values) is unchanged.
func (r *Reconciler) previewChange(ctx context.Context, target *Target, applier Applier, obj *unstructured.Unstructured, kinds *tickKinds, inNewNamespace bool,
	o *PreviewObject) error {
	failed := func(err error) error {
		return &PhaseError{Phase: PhaseDiff, Reason: plumbv1.ReasonDiffFailed, Err: err}
	}
	if kinds.isPending(obj.GroupVersionKind()) || inNewNamespace {
		o.Next = obj.DeepCopy() // its kind or its namespace comes with this apply: nothing to ask
		return maskSecret(nil, o.Next)
	}
	whole, err := target.Observer.Fetch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil {
		return failed(err)
	}
	var cached *compact.Object
	if whole != nil {
		o.Live, cached = whole.Content(), whole
		if o.Action == PreviewCreate {
			o.Action = PreviewUpdate // it exists without the App's labels: the apply adopts it
		}
	}
	differs, next, err := applier.DryRun(ctx, obj, cached)
	switch {
	case refusedByServer(err):
		o.Refused = redactSecret(err.Error(), obj, o.Live)
		o.Next = obj.DeepCopy()
	case err != nil:
		return failed(errors.New(redactSecret(err.Error(), obj, o.Live)))
	default:
		o.Next = next
		if !differs && o.Action == PreviewUpdate {
			o.Action = PreviewUnchanged
		}
	}
	return maskSecret(o.Live, o.Next)
}

// previewPrune lists the objects that left Git and that a prune would
// delete (read whole) or the prune guard keeps, as Prune decides from the
// API server.
func (r *Reconciler) previewPrune(ctx context.Context, target *Target, app *plumbv1.App, stale []*unstructured.Unstructured) ([]PreviewObject, error) {
	if !app.Spec.PruneEnabled() {
		return nil, nil
	}
	owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
	var out []PreviewObject
	for _, obj := range stale {
		whole, err := target.Observer.Fetch(ctx, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
		if err != nil {
			return nil, &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonPruneFailed, Err: fmt.Errorf("reading %s before pruning it: %w", idOf(obj), err)}
		}
		if whole == nil || !owner.Owns(whole.Content()) {
			continue // gone, or not the App's any more: Prune only drops it from the inventory
		}
		o := PreviewObject{ObjectRef: refOf(obj), Action: PreviewPrune, Live: whole.Content()}
		if guard, keep := ssa.PruneGuard(o.Live); keep {
			o.Action, o.Kept = PreviewKeep, guard.Message
		}
		if err := maskSecret(o.Live, nil); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// refusedByServer reports a dry-run that the API server answered by
// refusing the object itself (validation, an immutable field, an admission
// webhook's denial), which the Apply phase would fail on too; RBAC's
// refusal to let whoever previews make the dry-run, a timeout or a lost
// connection is no answer about the object.
func refusedByServer(err error) bool {
	var dryRun *ssaerrors.DryRunErr
	if !errors.As(err, &dryRun) {
		return false
	}
	cause := dryRun.Unwrap()
	switch {
	case apierrors.IsInvalid(cause), apierrors.IsBadRequest(cause), apierrors.IsConflict(cause), apierrors.IsRequestEntityTooLargeError(cause):
		return true
	case apierrors.IsForbidden(cause):
		// Admission webhooks and policies deny with Forbidden too; the
		// authorizer's denial (RBAC, impersonation) has its own form.
		return !authorizerDenial.MatchString(cause.Error())
	}
	return false
}

// authorizerDenial is how the API server's authorizer words a refusal.
var authorizerDenial = regexp.MustCompile(`is forbidden: User "[^"]*" cannot `)

// redactSecret replaces, in a message about an object, every value that
// objs (the rendered object, the live one; nil ones are skipped) hold when
// they are Secrets: an API server's or webhook's message may quote the
// object.
func redactSecret(message string, objs ...*unstructured.Unstructured) string {
	var values redact.Values
	for _, obj := range objs {
		if obj != nil {
			values.AddSecret(obj.Object)
		}
	}
	return values.In(message)
}

// redactedFor is err with its message redacted of the values of the
// Secrets among objs (an admission policy's message may quote them); it
// still unwraps to err, so what the API server said can be told apart.
func redactedFor(err error, objs ...*unstructured.Unstructured) error {
	if err == nil {
		return nil
	}
	if message := redactSecret(err.Error(), objs...); message != err.Error() {
		return &redactedError{message: message, cause: err}
	}
	return err
}

// redactedError is an error whose message hides Secret values.
type redactedError struct {
	message string
	cause   error
}

func (e *redactedError) Error() string { return e.message }
func (e *redactedError) Unwrap() error { return e.cause }

// refuseEmpty refuses a render of no objects unless the App allows it: it
// would prune everything the App applied.
func (r *Reconciler) refuseEmpty(app *plumbv1.App, empty bool, revision string) error {
	if !empty || app.Spec.AllowEmpty {
		return nil
	}
	return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonPruneFailed, Detail: "EmptySource",
		Err: fmt.Errorf("%s renders no objects at %s; refusing to apply nothing and prune the %d objects applied before (set spec.allowEmpty to allow it)",
			displayPath(app.Spec.Source.Path), revision, inventoryLen(app))}
}

// lastAppliedAnnotation is kubectl's copy of what it last applied, which
// holds a Secret's values in the clear.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// maskSecret masks the values of a Secret, before and after (either may
// be nil), as Flux's diff does: "***" where they are equal, "*** (before)"
// and "*** (after)" where they differ; stringData and kubectl's
// last-applied copy are masked too.
func maskSecret(before, after *unstructured.Unstructured) error {
	isSecret := func(u *unstructured.Unstructured) bool {
		return u != nil && u.GetKind() == "Secret" && u.GroupVersionKind().Group == ""
	}
	if !isSecret(before) && !isSecret(after) {
		return nil
	}
	for _, u := range []*unstructured.Unstructured{before, after} {
		if u == nil {
			continue
		}
		// A data or stringData that is no map of strings (a render the API
		// server would refuse) is masked whole.
		for _, field := range []string{"data", "stringData"} {
			if v, ok := u.Object[field]; ok && !isStringMap(v) {
				u.Object[field] = map[string]any{"(not a map of strings)": "***"}
			}
		}
		if values, ok := u.Object["stringData"].(map[string]any); ok {
			for k := range values {
				values[k] = "***"
			}
		}
		if annotations := u.GetAnnotations(); annotations[lastAppliedAnnotation] != "" {
			annotations[lastAppliedAnnotation] = "***"
			u.SetAnnotations(annotations)
		}
	}
	if err := fluxssa.SanitizeUnstructuredData(before, after); err != nil {
		return errors.New("masking a Secret's values failed") // its message may quote them
	}
	return nil
}

// isStringMap reports a map whose values are all strings.
func isStringMap(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, value := range m {
		if _, ok := value.(string); !ok {
			return false
		}
	}
	return true
}
