package reconcile

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/destination"
)

// Target is the cluster a tick acts on: where it observes, applies and
// prunes the App's objects. The cluster plumb runs in is made of Deps; a
// destination cluster (spec.destination) has parts of its own.
type Target struct {
	// Name is the destination's name (its kubeconfig Secret's), empty for
	// the cluster plumb runs in.
	Name string
	// Server is the destination's API server URL (empty for plumb's own).
	Server   string
	Observer Observer
	// Applier acts with the rights of the kubeconfig's user (plumb's own
	// rights for plumb's cluster); Identities, when not nil, acts as a
	// ServiceAccount on the cluster.
	Applier    Applier
	Identities Identities
	Mapper     meta.RESTMapper
	// Cluster tells Helm renders what the cluster serves; nil renders with
	// Helm's defaults.
	Cluster ClusterInfo
	// Reachable asks whether the cluster answers (it may answer from a
	// recent success); nil for plumb's own. Forget makes it ask afresh.
	Reachable func() error
	Forget    func()
}

// Destinations gives the Target of an App's destination cluster, built from
// the kubeconfig of a Secret in the App's namespace, shared by the Apps
// that name that Secret (with that content).
type Destinations interface {
	// For returns the Target of kubeconfig, read from Secret secret of
	// app's namespace, and records that app uses it and no other.
	For(app types.NamespacedName, secret string, kubeconfig []byte) (*Target, error)
	// Release records that app uses no destination: its informers' and
	// identity's uses are dropped, and a Target no App uses is stopped.
	Release(app types.NamespacedName)
}

// targetOf is the cluster app's objects live in: plumb's own, or its
// spec.destination's, resolved without asking that cluster anything. A
// destination the controller refuses, or whose kubeconfig cannot be read
// or used, fails the Observe phase.
func (r *Reconciler) targetOf(ctx context.Context, app *plumbv1.App) (*Target, error) {
	key := client.ObjectKeyFromObject(app)
	dest := app.Spec.Destination
	if dest == nil {
		if r.destinations != nil {
			r.destinations.Release(key)
		}
		return r.local, nil
	}
	fail := func(detail string, err error, terminal bool) error {
		return &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Detail: detail, Err: err, Terminal: terminal}
	}
	// What the App held of plumb's own cluster (it may have deployed there
	// before) is let go.
	r.Observer.Release(key)
	if r.Identities != nil {
		r.Identities.Release(key)
	}
	if r.Policy.NoRemoteClusters || r.destinations == nil {
		return nil, fail("DestinationRefused", errors.New("spec.destination names another cluster, and this controller deploys only into its own (--no-remote-clusters)"), true)
	}
	ref := dest.KubeConfig.SecretRef
	secret, err := r.Credentials.Get(ctx, key, ref.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.destinations.Release(key) // its connection stops with the last App that uses it
		}
		return nil, fail("KubeConfigUnavailable", fmt.Errorf("reading the kubeconfig Secret %s/%s: %w", app.Namespace, ref.Name, err), false)
	}
	data, err := kubeConfigOf(secret.Data, ref.Key)
	if err != nil {
		r.destinations.Release(key)
		return nil, fail("KubeConfigUnavailable", fmt.Errorf("Secret %s/%s: %w", app.Namespace, ref.Name, err), false)
	}
	target, err := r.destinations.For(key, ref.Name, data)
	switch {
	case errors.Is(err, destination.ErrInvalidKubeConfig):
		r.destinations.Release(key)
		return nil, fail("KubeConfigInvalid", err, false)
	case errors.Is(err, destination.ErrTooManyDestinations):
		return nil, fail("TooManyDestinations", err, false)
	case err != nil:
		return nil, fail("DestinationUnavailable", err, false)
	}
	return target, nil
}

// reach fails the Observe phase, as ClusterUnreachable, when a destination
// cluster does not answer: the App keeps its last applied state, nothing
// is pruned, and a worker is not held for the informers' sync timeout.
func reach(target *Target) error {
	if target.Reachable == nil {
		return nil
	}
	if err := target.Reachable(); err != nil {
		return &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonClusterUnreachable,
			Err: fmt.Errorf("destination %s: %w", target.Name, err)}
	}
	return nil
}

// unreached turns a phase's failure on a destination cluster that no
// longer answers (asked again now) into ClusterUnreachable, in the phase
// that failed: a cluster lost during a tick fails it as one lost before.
func unreached(target *Target, err error) error {
	var phaseErr *PhaseError
	if err == nil || target == nil || target.Reachable == nil || !errors.As(err, &phaseErr) || phaseErr.Reason == plumbv1.ReasonClusterUnreachable ||
		phaseErr.Terminal || phaseErr.Phase == PhaseRead {
		return err // a refusal, or the source's failure, is no cluster's
	}
	if target.Forget != nil {
		target.Forget()
	}
	if probe := target.Reachable(); probe != nil {
		return &PhaseError{Phase: phaseErr.Phase, Reason: plumbv1.ReasonClusterUnreachable,
			Err: fmt.Errorf("destination %s: %w (%v)", target.Name, probe, phaseErr.Err)}
	}
	return err
}

// errNoKubeConfig says a kubeconfig Secret lacks the key that holds it.
var errNoKubeConfig = errors.New("no kubeconfig")

// kubeConfigOf is the kubeconfig in a Secret's data: under key, or, when no
// key is named, under "value" or else "value.yaml" (Cluster API's names).
func kubeConfigOf(data map[string][]byte, key string) ([]byte, error) {
	if key != "" {
		if v, ok := data[key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("%w: it has no key %q", errNoKubeConfig, key)
	}
	for _, k := range []string{"value", "value.yaml"} {
		if v, ok := data[k]; ok {
			return v, nil
		}
	}
	return nil, fmt.Errorf(`%w: it has neither key "value" nor "value.yaml" (name the key in spec.destination.kubeConfig.secretRef.key)`, errNoKubeConfig)
}

// destinationLost reports whether err says the App's destination cannot
// be used whatever is retried: its kubeconfig Secret is gone, holds no
// usable kubeconfig, or the controller refuses other clusters. A deleted
// App's objects there are then left in place.
func destinationLost(err error) bool {
	var phaseErr *PhaseError
	if !errors.As(err, &phaseErr) {
		return false
	}
	switch phaseErr.Detail {
	case "KubeConfigUnavailable":
		return apierrors.IsNotFound(err) || errors.Is(err, errNoKubeConfig)
	case "KubeConfigInvalid", "DestinationRefused":
		return true
	}
	return false
}

// recordDestination records in the App's status the cluster its objects go
// to. When that changed, the objects applied to the former one are left
// there (named by a DestinationChanged Event), not pruned: the inventory
// names objects of the former cluster, and the same names in the new one
// may be anyone's.
func (r *Reconciler) recordDestination(app *plumbv1.App, target *Target, log *zap.Logger) {
	former := app.Status.Destination
	if former == target.Name {
		return
	}
	app.Status.Destination = target.Name
	if n := inventoryLen(app); n > 0 {
		r.Events.Eventf(app, corev1.EventTypeWarning, plumbv1.ReasonDestinationChanged,
			"the App's destination changed from %s to %s: its %d objects in the former are left there, not pruned", destinationName(former), destinationName(target.Name), n)
		log.Warn("Left the objects of the App's former destination", zap.String("phase", string(PhaseObserve)),
			zap.String("revision", app.Status.LastAppliedRevision), zap.String("from", destinationName(former)), zap.String("to", destinationName(target.Name)), zap.Int("objects", n))
		app.Status.Inventory = nil
		app.Status.Kept = nil
		// A drift alert of the former cluster's objects ends (they are no
		// longer watched), sent with the label it fired with; then what was
		// remembered of them (versions written, drift) says nothing of the
		// new one's.
		r.endDriftEpisode(app, "its destination changed, and its objects in "+destinationName(former)+" are left there, no longer watched")
		r.memory.forgetApp(client.ObjectKeyFromObject(app))
	}
}

// destinationName names a destination for people: its kubeconfig Secret,
// or plumb's own cluster.
func destinationName(name string) string {
	if name == "" {
		return "the cluster plumb runs in"
	}
	return "the cluster of Secret " + name
}
