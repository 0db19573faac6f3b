package reconcile

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// DependencyIndex is the name of the App cache's field index of each App
// by the Apps it depends on (see DependencyKeys): when an App changes, the
// Apps that wait for it are found through it, and enqueued.
const DependencyIndex = "plumb.dev/depends-on"

// DependencyKeys are the index values of an App: "namespace/name" of each
// App in its spec.dependsOn.
func DependencyKeys(app *plumbv1.App) []string {
	keys := make([]string, 0, len(app.Spec.DependsOn))
	for _, key := range dependenciesOf(app) {
		keys = append(keys, key.String())
	}
	return keys
}

// dependenciesOf are the keys of the Apps app depends on.
func dependenciesOf(app *plumbv1.App) []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(app.Spec.DependsOn))
	for _, d := range app.Spec.DependsOn {
		ns := d.Namespace
		if ns == "" {
			ns = app.Namespace
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: d.Name})
	}
	return out
}

// maxDependencyWalk bounds how many Apps the search for a cycle visits.
const maxDependencyWalk = 1000

// waitForDependencies holds the tick while an App in spec.dependsOn is not
// Ready at its current revision, or does not exist: the App is then
// Reconciling (reason DependencyNotReady, naming them) and nothing is read
// or applied; the dependency's next change enqueues it (DependencyIndex).
// A spec.dependsOn that leads back to the App is refused (Stalled, reason
// DependencyCycle, naming the cycle), as is one across namespaces when the
// controller forbids cross-namespace references. It reports whether the
// tick must stop here, with the error for the queue.
func (r *Reconciler) waitForDependencies(ctx context.Context, app *plumbv1.App, log *zap.Logger) (bool, error) {
	if len(app.Spec.DependsOn) == 0 {
		return false, nil
	}
	key := client.ObjectKeyFromObject(app)
	now := r.now()
	stop := func(reason, message string, stalled bool) {
		previous := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		setCondition(app, plumbv1.ConditionReady, false, reason, message, now)
		setCondition(app, plumbv1.ConditionReconciling, !stalled, reason, message, now)
		setCondition(app, plumbv1.ConditionStalled, stalled, reason, message, now)
		if previous == nil || previous.Reason != reason || previous.Message != truncate(message, 1024) {
			kind := corev1.EventTypeNormal
			if stalled {
				kind = corev1.EventTypeWarning
			}
			r.Events.Eventf(app, kind, reason, "%s", truncate(message, 1000))
			log.Info("Waited for dependencies", zap.String("phase", "start"), zap.String("reason", reason), zap.String("message", message))
		}
	}
	if r.Policy.NoCrossNamespace {
		for _, dep := range dependenciesOf(app) {
			if dep.Namespace != app.Namespace {
				stop(plumbv1.ReasonDependencyNotReady, fmt.Sprintf("spec.dependsOn names App %s in another namespace, which this controller forbids (--no-cross-namespace)", dep), true)
				return true, queue.Terminal(fmt.Errorf("cross-namespace dependency %s", dep))
			}
		}
	}
	if cycle := r.dependencyCycle(ctx, key); cycle != nil {
		names := make([]string, 0, len(cycle))
		for _, k := range cycle {
			names = append(names, k.String())
		}
		stop(plumbv1.ReasonDependencyCycle, "spec.dependsOn forms a cycle: "+strings.Join(names, " → ")+"; none of these Apps can apply until one of them stops depending on the next", true)
		return true, queue.Terminal(fmt.Errorf("dependency cycle %s", strings.Join(names, " → ")))
	}
	var waiting []string
	for _, dep := range dependenciesOf(app) {
		other := &plumbv1.App{}
		if err := r.Client.Get(ctx, dep, other); err != nil {
			if apierrors.IsNotFound(err) {
				waiting = append(waiting, fmt.Sprintf("App %s does not exist", dep))
				continue
			}
			waiting = append(waiting, fmt.Sprintf("App %s could not be read: %v", dep, err))
			continue
		}
		if why := notReadyAtRevision(other); why != "" {
			waiting = append(waiting, fmt.Sprintf("App %s %s", dep, why))
		}
	}
	if len(waiting) == 0 {
		return false, nil
	}
	stop(plumbv1.ReasonDependencyNotReady, "waiting for the Apps it depends on, nothing applied: "+strings.Join(waiting, "; "), false)
	return true, nil
}

// notReadyAtRevision says why an App is not Ready at its current revision
// ("" when it is): Ready True for its current generation, and the last
// revision read applied.
func notReadyAtRevision(app *plumbv1.App) string {
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	switch {
	case ready == nil:
		return "has not ticked yet"
	case ready.Status != metav1.ConditionTrue:
		return fmt.Sprintf("is not Ready (%s: %s)", ready.Reason, truncate(ready.Message, 200))
	case ready.ObservedGeneration != app.Generation || app.Status.ObservedGeneration != app.Generation:
		return "has a spec it has not applied yet"
	case app.Status.LastAppliedRevision == "" || app.Status.LastAppliedRevision != app.Status.LastAttemptedRevision:
		return fmt.Sprintf("has not applied its current revision %s yet", app.Status.LastAttemptedRevision)
	}
	return ""
}

// dependencyCycle is a path of spec.dependsOn from start back to start
// (start first and last), nil when there is none. It walks the App cache,
// at most maxDependencyWalk Apps.
func (r *Reconciler) dependencyCycle(ctx context.Context, start types.NamespacedName) []types.NamespacedName {
	visited := map[types.NamespacedName]bool{}
	var path []types.NamespacedName
	var walk func(key types.NamespacedName) bool
	walk = func(key types.NamespacedName) bool {
		if len(visited) >= maxDependencyWalk {
			return false
		}
		visited[key] = true
		path = append(path, key)
		app := &plumbv1.App{}
		if err := r.Client.Get(ctx, key, app); err == nil {
			for _, dep := range dependenciesOf(app) {
				if dep == start {
					path = append(path, start)
					return true
				}
				if !visited[dep] && walk(dep) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(start) {
		return path
	}
	return nil
}
