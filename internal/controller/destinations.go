package controller

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/internal/clusterinfo"
	"github.com/plumb-dev/plumb/internal/destination"
	"github.com/plumb-dev/plumb/internal/egress"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/ssa"
)

// destinations connects Apps to the clusters they name in
// spec.destination: per kubeconfig Secret, informers of their own (the
// same label filtering as plumb's own cluster's, all namespaces), an
// applier with the kubeconfig's rights, ServiceAccounts impersonated on
// that cluster, and its kinds for Helm.
type destinations struct {
	manager *destination.Manager[*remote]
}

// remote is one destination cluster's parts.
type remote struct {
	target *reconcile.Target
	cache  *informers.Cache
}

// newDestinations makes the destinations of a controller: none when it
// refuses other clusters (--no-remote-clusters).
func (l *loop) newDestinations(events reconcile.ObjectEvents) reconcile.Destinations {
	if l.opts.Policy.NoRemoteClusters {
		return nil
	}
	d := &destinations{}
	blocked := l.opts.DestinationBlockedPrefixes
	if blocked == nil {
		blocked = egress.DefaultBlockedPrefixes()
	}
	d.manager = destination.New(destination.Options[*remote]{
		Max: l.opts.MaxDestinations, MaxPerNamespace: l.opts.MaxDestinationsPerNamespace,
		Parse: destination.ParseOptions{AllowPlugins: l.opts.AllowKubeConfigPlugins, Blocked: blocked},
		Build: func(conn *destination.Connection) (*remote, error) {
			return l.buildRemote(conn, events)
		},
		Leave: func(app types.NamespacedName, r *remote) {
			r.cache.Release(app)
			r.target.Identities.Release(app)
		},
		Stop: func(r *remote) { r.cache.Stop() },
	})
	l.destinations = d.manager
	return d
}

// For is reconcile.Destinations' For.
func (d *destinations) For(app types.NamespacedName, secret string, kubeconfig []byte) (*reconcile.Target, error) {
	r, _, err := d.manager.For(app, secret, kubeconfig)
	if err != nil {
		return nil, err
	}
	return r.target, nil
}

// Release is reconcile.Destinations' Release.
func (d *destinations) Release(app types.NamespacedName) { d.manager.Release(app) }

// buildRemote makes the parts of one destination cluster.
func (l *loop) buildRemote(conn *destination.Connection, events reconcile.ObjectEvents) (*remote, error) {
	clients, err := destination.NewClients(conn.Config, l.scheme)
	if err != nil {
		return nil, err
	}
	mapper := clients.Mapper
	// Any object there may carry any App's labels: its events are for the
	// Apps that use this connection alone.
	ours := func(tell func(types.NamespacedName)) func(types.NamespacedName) {
		return func(app types.NamespacedName) {
			if l.destinations.Uses(app, conn) {
				tell(app)
			}
		}
	}
	observer := informers.New(clients.Dynamic, mapper, informers.Options{
		OnEvent: ours(events.ObjectChanged), OnHealth: ours(events.HealthChanged), IsOwnWrite: events.IsOwnWrite,
		MaxTypes: l.opts.MaxDestinationKinds,
	})
	identities := impersonation.New(conn.Config, impersonation.Options[reconcile.Applier]{
		Build: func(cfg *rest.Config) (reconcile.Applier, error) {
			c, err := client.New(cfg, client.Options{Scheme: l.scheme, Mapper: mapper})
			if err != nil {
				return nil, err
			}
			return ssa.NewManager(c), nil
		},
		// On the destination, with the kubeconfig's rights: one request
		// per tick of an App that acts as a ServiceAccount there.
		Exists: impersonation.ServiceAccountsIn(clients.Direct),
	})
	return &remote{cache: observer, target: &reconcile.Target{Name: conn.Name, Server: conn.Server, Observer: observer,
		Applier: ssa.NewManager(clients.Direct), Identities: identities, Mapper: mapper, Cluster: clusterinfo.New(clients.Discovery, 0), Reachable: conn.Reachable, Forget: conn.Forget}}, nil
}
