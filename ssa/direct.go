package ssa

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fluxcd/cli-utils/pkg/object"
	fluxssa "github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"github.com/fluxcd/pkg/ssa/utils"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers/compact"
)

// Applied is one object applied by ApplyDirect: what was sent, what the API
// server answered (with managedFields), and whether it was created.
type Applied struct {
	Desired *unstructured.Unstructured
	Live    *unstructured.Unstructured
	Created bool
}

// DirectOptions tune ApplyDirect.
type DirectOptions struct {
	// Force recreates objects whose immutable fields changed (objects
	// annotated plumb.dev/force: enabled are recreated regardless).
	Force bool
	// Exists tells whether an object exists already (from the cache), to
	// report created or configured without asking the API server.
	Exists func(*unstructured.Unstructured) bool
	// WaitOptions bound the wait for CRDs, Namespaces and ClusterRoles.
	Wait fluxssa.WaitOptions
}

// ApplyDirect server-side applies each object with one request (no Get, no
// dry-run: the caller decided they differ). CRDs, Namespaces and
// ClusterRoles go first and are waited for; the objects of a stage are
// applied applyConcurrency at a time. It returns what was applied, in the
// objects' order: after a failure no further apply starts, those under
// way finish (an apply cut off might still have happened), and the first
// failure is returned.
func (m *Manager) ApplyDirect(ctx context.Context, objects []*unstructured.Unstructured, opts DirectOptions) ([]Applied, *fluxssa.ChangeSet, error) {
	var definitions, rest []*unstructured.Unstructured
	for _, o := range objects {
		if utils.IsClusterDefinition(o) {
			definitions = append(definitions, o)
		} else {
			rest = append(rest, o)
		}
	}
	changes := fluxssa.NewChangeSet()
	var applied []Applied
	for i, stage := range [][]*unstructured.Unstructured{definitions, rest} {
		done, err := m.applyStage(ctx, stage, opts)
		for _, a := range done {
			applied = append(applied, a)
			action := fluxssa.ConfiguredAction
			if a.Created {
				action = fluxssa.CreatedAction
			}
			changes.Add(fluxssa.ChangeSetEntry{
				ObjMetadata:  object.UnstructuredToObjMetadata(a.Live),
				GroupVersion: a.Live.GroupVersionKind().Version,
				Subject:      utils.FmtUnstructured(a.Live),
				Action:       action,
			})
		}
		if err != nil {
			return applied, changes, err
		}
		if i == 0 && len(definitions) > 0 {
			if err := m.resources.WaitForSetWithContext(ctx, changes.ToObjMetadataSet(), opts.Wait); err != nil {
				return applied, changes, fmt.Errorf("waiting for CRDs and Namespaces: %w", err)
			}
		}
	}
	return applied, changes, nil
}

// applyConcurrency is how many applies of one stage are in flight at once
// (as many as Flux's ApplyAll runs, see NewManager).
const applyConcurrency = 4

// applyStage applies the objects of one stage, applyConcurrency at a time,
// and returns those applied, in the stage's order, with the first failure
// in that order. After a failure no further apply starts.
func (m *Manager) applyStage(ctx context.Context, stage []*unstructured.Unstructured, opts DirectOptions) ([]Applied, error) {
	results := make([]Applied, len(stage))
	errs := make([]error, len(stage))
	var failed atomic.Bool
	slots := make(chan struct{}, applyConcurrency)
	var wg sync.WaitGroup
	for i, desired := range stage {
		slots <- struct{}{}
		if failed.Load() {
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			results[i], errs[i] = m.applyOne(ctx, desired, opts)
			if errs[i] != nil {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	var applied []Applied
	var first error
	for i := range stage {
		switch {
		case errs[i] != nil && first == nil:
			first = errs[i]
		case errs[i] == nil && results[i].Live != nil:
			applied = append(applied, results[i])
		}
	}
	return applied, first
}

func (m *Manager) applyOne(ctx context.Context, desired *unstructured.Unstructured, opts DirectOptions) (Applied, error) {
	existed := opts.Exists != nil && opts.Exists(desired)
	live := desired.DeepCopy()
	err := m.client.Patch(ctx, live, client.Apply, client.FieldOwner(plumbv1.FieldManager), client.ForceOwnership)
	if err != nil && ssaerrors.IsImmutableError(err) && (opts.Force || desired.GetAnnotations()[plumbv1.AnnotationForce] == "enabled") {
		// Recreate: delete, then apply again.
		if delErr := m.client.Delete(ctx, desired.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground)); delErr != nil && !apierrors.IsNotFound(delErr) {
			return Applied{}, fmt.Errorf("%s: recreating after an immutable-field change: %w", describe(desired), delErr)
		}
		live = desired.DeepCopy()
		err = m.client.Patch(ctx, live, client.Apply, client.FieldOwner(plumbv1.FieldManager), client.ForceOwnership)
		existed = false
	}
	if err != nil {
		return Applied{}, fmt.Errorf("%s apply failed: %w", describe(desired), err)
	}
	return Applied{Desired: desired, Live: live, Created: !existed}, nil
}

// DryRun asks the API server (one server-side dry-run apply, no Get)
// whether applying obj would change live, the cached live object, and
// returns the object the apply would produce (with its managedFields). It
// compares what an apply sets: labels, annotations (kubectl's last-applied
// copy aside) and everything outside metadata and status, by digest (see
// compact.Object).
func (m *Manager) DryRun(ctx context.Context, obj *unstructured.Unstructured, live *compact.Object) (bool, *unstructured.Unstructured, error) {
	dryRun := obj.DeepCopy()
	err := m.client.Patch(ctx, dryRun, client.Apply, client.DryRunAll, client.FieldOwner(plumbv1.FieldManager), client.ForceOwnership)
	if err != nil {
		return false, nil, ssaerrors.NewDryRunErr(err, obj)
	}
	if live == nil {
		return true, dryRun, nil
	}
	answer, err := compact.AppliedDigest(dryRun)
	if err != nil {
		return false, nil, fmt.Errorf("%s: digesting the dry-run's answer: %w", describe(obj), err)
	}
	return answer != live.AppliedDigest(), dryRun, nil
}

// RemoveAdditions sends one JSON patch (RFC 6902) to obj, e.g. to remove
// fields someone else added inside what plumb applied, and returns the
// object as the API server answered. The patch's test operations make it
// fail rather than remove the wrong list item.
func (m *Manager) RemoveAdditions(ctx context.Context, obj *unstructured.Unstructured, patch []byte) (*unstructured.Unstructured, error) {
	target := obj.DeepCopy()
	if err := m.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(plumbv1.FieldManager)); err != nil {
		return nil, fmt.Errorf("%s: removing fields added outside Git: %w", describe(obj), err)
	}
	return target, nil
}
