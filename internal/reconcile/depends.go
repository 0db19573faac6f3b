package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/queue"
	"github.com/plumb-dev/plumb/ssa"
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

// dependencyWait ends a tick that waits for the Apps it depends on, or
// refuses them: no phase failed, nothing was applied; queueErr is what the
// queue is told (a terminal error for a refusal, nil for a wait). It is a
// control signal, not an error: the tick that meets it ends well.
type dependencyWait struct{ queueErr error }

// gateOnDependencies holds a tick that would apply a revision or a spec the
// App has not applied yet while an App in spec.dependsOn is not Ready at
// its current revision, or does not exist: the App is then Reconciling
// (reason DependencyNotReady, naming them), and nothing is observed or
// applied; the dependency's next change enqueues it (DependencyIndex). A
// tick of what the App already applied (a drift to heal) is not held: a
// dependency that stops being Ready does not undo its dependents. A
// spec.dependsOn that leads back to the App is refused (Stalled, reason
// DependencyCycle, naming the cycle), and so is a dependency in another
// namespace that the App's ServiceAccount may not read, or any when the
// controller forbids cross-namespace references (DependencyNotAllowed).
// It returns nil when the tick goes on.
func (r *Reconciler) gateOnDependencies(ctx context.Context, app *plumbv1.App, revision string, log *zap.Logger) *dependencyWait {
	if len(app.Spec.DependsOn) == 0 || appliedBefore(app, revision) {
		return nil
	}
	key := client.ObjectKeyFromObject(app)
	now := r.now()
	// stop reports the wait, or a refusal (stalled: retried only when a spec
	// changes, or, for a refusal RBAC may lift, with backoff).
	stop := func(reason, message string, stalled, retry bool) *dependencyWait {
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
		// The resumed tick reads again: a render made before the
		// dependency's CRDs were served (Helm's .Capabilities) is not kept.
		r.memory.forgetRead(key)
		switch {
		case retry:
			return &dependencyWait{queueErr: errors.New(message)}
		case stalled:
			return &dependencyWait{queueErr: queue.Terminal(errors.New(message))}
		}
		return &dependencyWait{}
	}
	switch refusal, outcome := r.refuseDependencies(ctx, app); outcome {
	case refusedByPolicy:
		return stop(plumbv1.ReasonDependencyNotAllowed, refusal, true, false)
	case refusedByRBAC:
		return stop(plumbv1.ReasonDependencyNotAllowed, refusal, true, true)
	case notAsked:
		return stop(plumbv1.ReasonDependencyNotReady, refusal, false, true)
	}
	cycle, complete := r.dependencyCycle(ctx, key)
	if !complete {
		return stop(plumbv1.ReasonDependencyNotAllowed, fmt.Sprintf("spec.dependsOn reaches more than %d Apps; refused", maxDependencyWalk), true, false)
	}
	if cycle != nil {
		names := make([]string, 0, len(cycle))
		for _, k := range cycle {
			if k.Namespace != app.Namespace {
				names = append(names, "an App of another namespace") // the App may not read it: no name
				continue
			}
			names = append(names, k.String())
		}
		return stop(plumbv1.ReasonDependencyCycle, "spec.dependsOn forms a cycle: "+strings.Join(names, " → ")+
			"; none of these Apps can apply until one of them stops depending on the next", true, false)
	}
	var waiting []string
	for _, dep := range dependenciesOf(app) {
		other := &plumbv1.App{}
		if err := r.Client.Get(ctx, dep, other, client.UnsafeDisableDeepCopy); err != nil {
			if apierrors.IsNotFound(err) {
				waiting = append(waiting, fmt.Sprintf("App %s does not exist (or this controller does not watch it)", dep))
				continue
			}
			waiting = append(waiting, fmt.Sprintf("App %s could not be read: %v", dep, err))
			continue
		}
		if why := notReadyAtRevision(other, dep.Namespace == app.Namespace); why != "" {
			where := ""
			if name := other.Spec.Destination.SecretName(); name != "" && dep.Namespace == app.Namespace {
				where = " (into the cluster of Secret " + name + ")"
			}
			waiting = append(waiting, fmt.Sprintf("App %s%s %s", dep, where, why))
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	return stop(plumbv1.ReasonDependencyNotReady, "waiting for the Apps it depends on, nothing applied: "+strings.Join(waiting, "; "), false, false)
}

// appliedBefore reports whether the App already applied revision at its
// current generation: the revision it last converged to, or the one its
// last tick read and applied while leaving drift in place (driftPolicy
// alert), which it did not wait for dependencies to do.
func appliedBefore(app *plumbv1.App, revision string) bool {
	if app.Status.ObservedGeneration != app.Generation {
		return false
	}
	if revision == app.Status.LastAppliedRevision {
		return true
	}
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	return revision == app.Status.LastAttemptedRevision && ready != nil && ready.ObservedGeneration == app.Generation &&
		!WaitingReason(ready.Reason) && app.Status.Phases.Apply.LastError == ""
}

// WaitingReason reports a Ready reason of a tick that stopped for its
// dependencies (waiting for them, or refusing them).
func WaitingReason(reason string) bool {
	switch reason {
	case plumbv1.ReasonDependencyNotReady, plumbv1.ReasonDependencyCycle, plumbv1.ReasonDependencyNotAllowed:
		return true
	}
	return false
}

// What refuseDependencies found.
type refusalOutcome int

const (
	allowed         refusalOutcome = iota
	refusedByPolicy                // --no-cross-namespace: until a spec changes
	refusedByRBAC                  // the ServiceAccount may not read one: until RBAC changes
	notAsked                       // the question failed: asked again with backoff
)

// refuseDependencies says why the App may not depend on an App of another
// namespace ("" when it may): never under --no-cross-namespace; otherwise
// only on one its ServiceAccount may get (asked of the API server, one
// review per such dependency), so that no App acting as a ServiceAccount
// learns of another namespace's Apps more than that ServiceAccount may.
func (r *Reconciler) refuseDependencies(ctx context.Context, app *plumbv1.App) (string, refusalOutcome) {
	var elsewhere []types.NamespacedName
	for _, dep := range dependenciesOf(app) {
		if dep.Namespace != app.Namespace {
			elsewhere = append(elsewhere, dep)
		}
	}
	if len(elsewhere) == 0 {
		return "", allowed
	}
	if r.Policy.NoCrossNamespace {
		return fmt.Sprintf("spec.dependsOn names App %s in another namespace, which this controller forbids (--no-cross-namespace)", elsewhere[0]), refusedByPolicy
	}
	sa := r.serviceAccountOf(app)
	if sa == "" {
		return "", allowed // the App acts with the controller's own rights
	}
	applier, err := r.applierFor(ctx, app, r.local) // Apps live in plumb's own cluster
	if err != nil {
		return "could not act as the App's ServiceAccount to ask whether it may read the Apps it depends on in other namespaces: " + err.Error(), notAsked
	}
	accesses := make([]ssa.Access, 0, len(elsewhere))
	for _, dep := range elsewhere {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(plumbv1.GroupVersion.WithKind("App"))
		u.SetNamespace(dep.Namespace)
		u.SetName(dep.Name)
		accesses = append(accesses, ssa.Access{Verb: "get", Object: u})
	}
	denied, err := applier.Denied(ctx, impersonation.Username(app.Namespace, sa), accesses)
	if err != nil {
		return "could not ask whether the App may read the Apps it depends on in other namespaces: " + err.Error(), notAsked
	}
	if len(denied) > 0 {
		return "spec.dependsOn names Apps in other namespaces that the App's ServiceAccount may not read: " + strings.Join(denied, "; "), refusedByRBAC
	}
	return "", allowed
}

// notReadyAtRevision says why an App is not Ready at its current revision
// ("" when it is): Ready True for its current generation, and the last
// revision read applied. The dependency's own message is quoted only for
// an App of the same namespace: an App elsewhere learns its reason, not
// what its objects are called or why they failed.
func notReadyAtRevision(app *plumbv1.App, sameNamespace bool) string {
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	switch {
	case ready == nil:
		return "has not ticked yet"
	case ready.Status != metav1.ConditionTrue && !sameNamespace:
		return fmt.Sprintf("is not Ready (%s)", ready.Reason)
	case ready.Status != metav1.ConditionTrue:
		return fmt.Sprintf("is not Ready (%s: %s)", ready.Reason, truncate(ready.Message, 200))
	case ready.ObservedGeneration != app.Generation || app.Status.ObservedGeneration != app.Generation:
		return "has a spec it has not applied yet"
	case (app.Status.LastAppliedRevision == "" || app.Status.LastAppliedRevision != app.Status.LastAttemptedRevision) && !sameNamespace:
		return "has not applied its current revision yet"
	case app.Status.LastAppliedRevision == "" || app.Status.LastAppliedRevision != app.Status.LastAttemptedRevision:
		return fmt.Sprintf("has not applied its current revision %s yet", app.Status.LastAttemptedRevision)
	}
	return ""
}

// dependencyCycle is a path of spec.dependsOn from start back to start
// (start first and last), nil when there is none. It walks the App cache
// (without copying Apps), at most maxDependencyWalk Apps: complete is false
// when it stopped there.
func (r *Reconciler) dependencyCycle(ctx context.Context, start types.NamespacedName) (cycle []types.NamespacedName, complete bool) {
	visited := map[types.NamespacedName]bool{}
	var path []types.NamespacedName
	complete = true
	var walk func(key types.NamespacedName) bool
	walk = func(key types.NamespacedName) bool {
		if len(visited) >= maxDependencyWalk {
			complete = false
			return false
		}
		visited[key] = true
		path = append(path, key)
		app := &plumbv1.App{}
		if err := r.Client.Get(ctx, key, app, client.UnsafeDisableDeepCopy); err == nil {
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
		return path, true
	}
	return nil, complete
}
