package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/destination"
	"github.com/plumb-dev/plumb/queue"
)

// managed adapts a destination.Manager of Targets to Destinations.
type managed struct{ m *destination.Manager[*Target] }

func (d managed) For(app types.NamespacedName, secret string, kubeconfig []byte) (*Target, error) {
	t, _, err := d.m.For(app, secret, kubeconfig)
	return t, err
}

func (d managed) Release(app types.NamespacedName) { d.m.Release(app) }

func toClusterB(a *plumbv1.App) {
	a.Spec.Destination = &plumbv1.Destination{KubeConfig: plumbv1.KubeConfigReference{SecretRef: plumbv1.SecretKeyReference{Name: "cluster-b"}}}
}

// An App whose destination cannot be used fails the Observe phase, says
// why without quoting the kubeconfig, and applies nothing anywhere: the
// controller refuses other clusters, the Secret is missing, or it holds no
// usable kubeconfig.
func TestADestinationThatCannotBeUsedFailsTheObservePhase(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"})
	nothingApplied := func(t *testing.T, ns string) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "settings"}, &corev1.ConfigMap{}); err == nil {
			t.Error("settings was applied in plumb's own cluster")
		}
	}

	t.Run("--no-remote-clusters", func(t *testing.T) {
		app := newApp(t, repo, toClusterB)
		h := newHarnessAs(t, cluster.Config, Policy{NoRemoteClusters: true})
		msg := failed(t, h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer), PhaseObserve, plumbv1.ReasonObserveFailed, "DestinationRefused")
		if !strings.Contains(msg, "--no-remote-clusters") {
			t.Errorf("Ready's message %q does not name the flag", msg)
		}
		nothingApplied(t, app.Namespace)
	})

	built := 0
	withDestinations := func(t *testing.T) *harness {
		h := newHarness(t)
		h.r.destinations = managed{destination.New(destination.Options[*Target]{
			Build: func(*destination.Connection) (*Target, error) { built++; return h.r.local, nil },
		})}
		return h
	}
	t.Run("a missing Secret", func(t *testing.T) {
		app := newApp(t, repo, toClusterB)
		msg := failed(t, withDestinations(t).tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer), PhaseObserve, plumbv1.ReasonObserveFailed, "KubeConfigUnavailable")
		if !strings.Contains(msg, app.Namespace+"/cluster-b") || !strings.Contains(msg, "not found") {
			t.Errorf("Ready's message %q, want the Secret of the App's namespace not found", msg)
		}
		nothingApplied(t, app.Namespace)
	})
	t.Run("a kubeconfig with a token file", func(t *testing.T) {
		app := newApp(t, repo, toClusterB)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "cluster-b"}, StringData: map[string]string{"value": `apiVersion: v1
kind: Config
clusters: [{name: b, cluster: {server: "https://b.example:6443"}}]
users: [{name: u, user: {token: "t0ps3cret", tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]
contexts: [{name: b, context: {cluster: b, user: u}}]
current-context: b
`}}
		if err := c.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		got := withDestinations(t).tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
		msg := failed(t, got, PhaseObserve, plumbv1.ReasonObserveFailed, "KubeConfigInvalid")
		if !strings.Contains(msg, "tokenFile") || strings.Contains(msg, "t0ps3cret") {
			t.Errorf("Ready's message %q, want tokenFile named and the token not quoted", msg)
		}
		nothingApplied(t, app.Namespace)
	})
	if built != 0 {
		t.Errorf("%d connections built for destinations that cannot be used", built)
	}

	// Beyond --max-destinations: the first App's destination is open (it
	// reaches plumb's own cluster here), a second App's other destination
	// fails the Observe phase and applies nothing.
	t.Run("beyond --max-destinations", func(t *testing.T) {
		h := newHarness(t)
		h.r.destinations = managed{destination.New(destination.Options[*Target]{Max: 1,
			Build: func(*destination.Connection) (*Target, error) { return h.r.local, nil },
		})}
		first, second := newApp(t, repo, toClusterB), newApp(t, repo, toClusterB)
		for _, app := range []*plumbv1.App{first, second} {
			if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "cluster-b"},
				StringData: map[string]string{"value": validKubeConfig}}); err != nil {
				t.Fatal(err)
			}
		}
		ready(t, h.tick(t, client.ObjectKeyFromObject(first), queue.WakeTimer))
		msg := failed(t, h.tick(t, client.ObjectKeyFromObject(second), queue.WakeTimer), PhaseObserve, plumbv1.ReasonObserveFailed, "TooManyDestinations")
		if !strings.Contains(msg, "--max-destinations") {
			t.Errorf("Ready's message %q does not name the flag", msg)
		}
		nothingApplied(t, second.Namespace)
	})
}

// --no-cross-namespace holds for an App into another cluster as for
// one into plumb's own: an object of another namespace is refused, and
// nothing is applied there.
func TestNoCrossNamespaceHoldsOnADestination(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/theirs.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: theirs\n  namespace: default\n"})
	app := newApp(t, repo, toClusterB)
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "cluster-b"},
		StringData: map[string]string{"value": validKubeConfig}}); err != nil {
		t.Fatal(err)
	}
	h := newHarnessAs(t, cluster.Config, Policy{NoCrossNamespace: true})
	h.r.destinations = managed{destination.New(destination.Options[*Target]{
		Build: func(*destination.Connection) (*Target, error) { return h.r.local, nil },
	})}
	msg := failed(t, h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer), PhaseRead, plumbv1.ReasonReadFailed, "PolicyViolation")
	if !strings.Contains(msg, "theirs") {
		t.Errorf("Ready's message %q does not name the object of another namespace", msg)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "theirs"}, &corev1.ConfigMap{}); err == nil {
		t.Error("theirs was applied in namespace default")
	}
}

// validKubeConfig is a kubeconfig that parses (its server is never dialled
// in these tests: their destinations reach plumb's own cluster).
const validKubeConfig = `apiVersion: v1
kind: Config
clusters: [{name: b, cluster: {server: "https://b.example:6443"}}]
users: [{name: u, user: {token: "t"}}]
contexts: [{name: b, context: {cluster: b, user: u}}]
current-context: b
`

// A deleted App whose destination changed since its last tick prunes
// nothing: its inventory names objects of the former cluster (here plumb's
// own), and the same names in the new one may be anyone's. The new
// destination reaches plumb's own cluster too, so a prune there would
// delete the very objects checked.
func TestADeletedAppWhoseDestinationChangedPrunesNothing(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/settings.yaml": configMapYAML("settings")})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	h.r.destinations = managed{destination.New(destination.Options[*Target]{
		Build: func(*destination.Connection) (*Target, error) { return h.r.local, nil },
	})}
	ready(t, h.tick(t, key, queue.WakeTimer))
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "settings"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("settings was not applied: %v", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "cluster-b"}, StringData: map[string]string{"value": validKubeConfig}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"destination":{"kubeConfig":{"secretRef":{"name":"cluster-b"}}}}}`)
	if err := c.Patch(ctx, app, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	events := deleteAndFinalize(t, h, app)
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "settings"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("settings after the App was deleted with a changed destination: %v, want it left in place", err)
	}
	if !slices.ContainsFunc(events, func(e string) bool {
		return strings.Contains(e, plumbv1.ReasonOrphaned) && strings.Contains(e, "destination changed")
	}) {
		t.Errorf("Events %q, want an Orphaned Event that says the destination changed", events)
	}
}
