package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/ssa"
)

// finalize runs when an App is being deleted: with prune on it deletes the
// App's objects (those that still carry its labels) except those the prune
// guard keeps, which a NotPruned Event names; otherwise it leaves them
// (orphans). Then it removes the finalizer and forgets the App.
func (r *Reconciler) finalize(ctx context.Context, app *plumbv1.App, log *zap.Logger) (time.Duration, error) {
	if !slices.Contains(app.Finalizers, plumbv1.Finalizer) {
		return queue.Forget, nil
	}
	interval := app.Spec.IntervalOrDefault()
	if app.Spec.PruneEnabled() && !app.Spec.Suspend {
		stale := r.staleObjects(app.Status.Inventory, nil, nil)
		if len(stale) > 0 {
			applier, err := r.applierFor(ctx, app)
			if err != nil {
				r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonPruneFailed, "pruning the deleted App's objects: %v", err)
				return interval, fmt.Errorf("pruning the objects of deleted App %s/%s: %w", app.Namespace, app.Name, err)
			}
			cs, guarded, err := applier.Prune(ctx, stale, ssa.Owner{Name: app.Name, Namespace: app.Namespace})
			if cs != nil {
				r.reportUnserved(app, cs)
			}
			kept := make([]plumbv1.KeptObject, 0, len(guarded))
			for _, k := range guarded {
				kept = append(kept, keptObject(k.Object, k.Guard))
			}
			app.Status.Kept = nil // name every one: the App is going away
			r.reportKept(app, kept, "the App is deleted; ")
			if err != nil {
				r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonPruneFailed, "pruning the deleted App's objects: %v", err)
				return interval, fmt.Errorf("pruning the objects of deleted App %s/%s: %w", app.Namespace, app.Name, err)
			}
			log.Info("Pruned the deleted App's objects", zap.String("changes", changeSummary(cs)))
		}
	} else {
		log.Info("Orphaned the deleted App's objects", zap.Int("objects", inventoryLen(app)))
	}
	patch := client.MergeFrom(app.DeepCopy())
	app.Finalizers = slices.DeleteFunc(app.Finalizers, func(f string) bool { return f == plumbv1.Finalizer })
	if err := r.Client.Patch(ctx, app, patch); client.IgnoreNotFound(err) != nil {
		return interval, fmt.Errorf("removing the finalizer of App %s/%s: %w", app.Namespace, app.Name, err)
	}
	r.Observer.Release(client.ObjectKeyFromObject(app))
	r.Credentials.Release(client.ObjectKeyFromObject(app))
	if r.Identities != nil {
		r.Identities.Release(client.ObjectKeyFromObject(app))
	}
	r.memory.forgetApp(client.ObjectKeyFromObject(app))
	return queue.Forget, nil
}
