// Package preview runs an App's Read, Observe and Diff outside the
// controller, with the controller's own code (reconcile.Reconciler's
// Preview), for `plumb diff` and the dashboard. It observes by direct
// reads (it has no informers) and acts with the rights of whoever runs it:
// their kubeconfig's identity reads the App, its credentials Secret and
// its objects, and makes the server-side dry-runs, impersonating the
// App's ServiceAccount when it names one (as the controller does). It
// writes nothing.
package preview

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/informers"
	"github.com/plumb-dev/plumb/internal/clusterinfo"
	"github.com/plumb-dev/plumb/internal/destination"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/ssa"
)

// Options configure a Previewer.
type Options struct {
	// Config is the identity every request is made with.
	Config *rest.Config
	// GitCacheDir holds the clones of repositories read (and the reader
	// of a working copy's chart dependencies); it must be set.
	GitCacheDir string
	// LocalDir, when set, is a working copy of the App's folder that is
	// rendered instead of the App's Git source (source.Local).
	LocalDir string
	// Limits bound what one read may hold (default source.DefaultLimits).
	Limits *source.Limits
	// Policy is the controller's lockdown (its --no-cross-namespace and
	// --default-service-account), which the preview cannot read from the
	// cluster. File sources are refused whatever it says: one would be
	// read from this machine's disk, and what it holds sent to the API
	// server in dry-runs.
	Policy reconcile.Policy
	// RenderCommand, when set, runs Kustomize and Helm builds in a child
	// process, as the controller does (render.Isolation), each for at most
	// RenderTimeout (default source.DefaultRenderTimeout) and with at most
	// RenderMemoryBytes (default DefaultRenderMemoryBytes).
	RenderCommand     []string
	RenderTimeout     time.Duration
	RenderMemoryBytes uint64
	// AllowKubeConfigPlugins lets a destination's kubeconfig run an exec
	// credential plugin or an auth-provider on this machine.
	AllowKubeConfigPlugins bool
	// DestinationBlocked are the address ranges a destination's API server
	// may not be at (none when empty), as the controller's
	// --destination-blocked-cidrs.
	DestinationBlocked []netip.Prefix
	Log                *zap.Logger
}

// DefaultRenderMemoryBytes is the memory a preview's Kustomize or Helm
// build may take by default, the controller's default.
const DefaultRenderMemoryBytes = 2 << 30

// Previewer previews Apps. Each Preview starts from nothing: what one
// found is not remembered for the next.
type Previewer struct {
	opts      Options
	apps      client.Client
	clientset kubernetes.Interface
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
	scheme    *runtime.Scheme
}

// New makes a Previewer.
func New(opts Options) (*Previewer, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Limits == nil {
		limits := source.DefaultLimits()
		opts.Limits = &limits
	}
	if opts.RenderTimeout <= 0 {
		opts.RenderTimeout = source.DefaultRenderTimeout
	}
	if opts.RenderMemoryBytes == 0 {
		opts.RenderMemoryBytes = DefaultRenderMemoryBytes
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := plumbv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(opts.Config)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(opts.Config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("discovering the API server's kinds: %w", err)
	}
	apps, err := client.New(opts.Config, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	clientset, err := kubernetes.NewForConfigAndClient(opts.Config, httpClient)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(opts.Config, httpClient)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(opts.Config, httpClient)
	if err != nil {
		return nil, err
	}
	return &Previewer{opts: opts, apps: apps, clientset: clientset, dynamic: dyn, discovery: disco, scheme: scheme}, nil
}

// Client is the Previewer's client (the App reads, as the same identity).
func (p *Previewer) Client() client.Client { return p.apps }

// Preview previews app (as read from the API server; its spec may be
// changed first, e.g. its ref, to preview another revision).
func (p *Previewer) Preview(ctx context.Context, app *plumbv1.App) (*reconcile.Preview, error) {
	sa := p.opts.Policy.ServiceAccountOf(app)
	if as := p.opts.Config.Impersonate.UserName; as != "" && sa != "" {
		why := ""
		if app.Spec.ServiceAccountName == "" {
			why = " (the controller's --default-service-account, for Apps that name none)"
		}
		return nil, fmt.Errorf("the App acts as ServiceAccount %s/%s%s, which this preview would impersonate, and you act as %s already: Kubernetes impersonates once, so it cannot be previewed as that ServiceAccount here (leave out --as, or preview with plumb diff and your own kubeconfig)",
			app.Namespace, sa, why, as)
	}
	var isolation *render.Isolation
	if len(p.opts.RenderCommand) > 0 {
		isolation = &render.Isolation{Command: p.opts.RenderCommand, Timeout: p.opts.RenderTimeout, MemoryBytes: p.opts.RenderMemoryBytes}
	}
	var reader reconcile.Reader
	gitReader, err := source.NewReader(source.Options{CacheDir: p.opts.GitCacheDir, Limits: *p.opts.Limits, Isolation: isolation,
		AllowInsecureRegistries: p.opts.Policy.AllowInsecureRegistries})
	if err != nil {
		return nil, err
	}
	reader = gitReader
	if p.opts.LocalDir != "" {
		// A working copy's chart gets its dependencies as a commit's would.
		reader = &source.Local{Dir: p.opts.LocalDir, Limits: *p.opts.Limits, Isolation: isolation, Dependencies: gitReader}
		app = withoutSourceAccount(app)
	}
	applier := ssa.NewManager(p.apps)
	// An App that acts as a ServiceAccount is previewed as that
	// ServiceAccount, as the controller acts: whoever previews must be
	// allowed to impersonate it.
	identities := impersonation.New(p.opts.Config, impersonation.Options[reconcile.Applier]{
		Build: func(cfg *rest.Config) (reconcile.Applier, error) {
			c, err := client.New(cfg, client.Options{Scheme: p.scheme, Mapper: p.apps.RESTMapper()})
			if err != nil {
				return nil, err
			}
			return ssa.NewManager(c), nil
		},
		Exists: func(ctx context.Context, namespace, name string) (bool, error) {
			_, err := p.clientset.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		},
	})
	r, err := reconcile.New(reconcile.Deps{
		Client:      p.apps,
		APIReader:   p.apps,
		Credentials: secrets{clientset: p.clientset, local: p.opts.LocalDir != "" && !readsChartAccounts(app), kubeConfig: app.Spec.Destination.SecretName()},
		Mapper:      p.apps.RESTMapper(),
		Cluster:     clusterinfo.New(p.discovery, 0),
		Reader:      reader,
		NewObserver: func(reconcile.ObjectEvents) reconcile.Observer {
			return informers.NewDirect(p.dynamic, p.apps.RESTMapper())
		},
		Applier:    applier,
		Identities: identities,
		NewDestinations: func(reconcile.ObjectEvents) reconcile.Destinations {
			return destinations{scheme: p.scheme, parse: destination.ParseOptions{AllowPlugins: p.opts.AllowKubeConfigPlugins, Blocked: p.opts.DestinationBlocked}}
		},
		Policy: reconcile.Policy{NoCrossNamespace: p.opts.Policy.NoCrossNamespace, DefaultServiceAccount: p.opts.Policy.DefaultServiceAccount,
			AllowInsecureRegistries: p.opts.Policy.AllowInsecureRegistries, NoRemoteClusters: p.opts.Policy.NoRemoteClusters},
		Events: noEvents{},
		Log:    p.opts.Log,
	})
	if err != nil {
		return nil, err
	}
	return r.Preview(ctx, app)
}

// withoutSourceAccount is app without what only a read of its source
// would use: the account and verification keys of an OCI artifact or a
// bucket, and a chart's signature (a working copy is signed by no one).
// A Helm source's account stays: its chart's dependencies from that
// repository are fetched with it.
func withoutSourceAccount(app *plumbv1.App) *plumbv1.App {
	app = app.DeepCopy()
	src := &app.Spec.Source
	src.SecretRef = nil
	if src.Git != nil {
		src.Git.SecretRef = nil
	}
	if src.OCI != nil {
		src.OCI.SecretRef, src.OCI.Verify = nil, nil
	}
	if src.Bucket != nil {
		src.Bucket.SecretRef = nil
	}
	if src.Helm != nil {
		src.Helm.Verify = nil
	}
	return app
}

// readsChartAccounts reports whether a read of the App's chart may use
// its Secrets also from a working copy: a Helm source's account (for
// dependencies from its repository) and helm.repositories' accounts.
func readsChartAccounts(app *plumbv1.App) bool {
	return app.Spec.Source.Helm != nil || app.Spec.Helm != nil && len(app.Spec.Helm.Repositories) > 0
}

// secrets reads an App's Secrets; for a working copy whose read needs no
// account (local), none: the preview then needs no right to read them.
type secrets struct {
	clientset kubernetes.Interface
	local     bool
	// kubeConfig is the Secret of the App's destination, read even for a
	// working copy.
	kubeConfig string
}

func (s secrets) Get(ctx context.Context, app types.NamespacedName, name string) (*corev1.Secret, error) {
	if s.local && name != s.kubeConfig {
		return &corev1.Secret{}, nil
	}
	return s.clientset.CoreV1().Secrets(app.Namespace).Get(ctx, name, metav1.GetOptions{})
}

func (secrets) Release(types.NamespacedName, ...string) {}

// noEvents records nothing: a preview tells no one.
type noEvents struct{}

func (noEvents) Eventf(runtime.Object, string, string, string, ...any) {}

// destinations reach an App's destination cluster for a preview, with the
// kubeconfig its Secret holds (read with the previewer's own rights): one
// request per object, as plumb's own cluster is read.
type destinations struct {
	scheme *runtime.Scheme
	parse  destination.ParseOptions
}

func (d destinations) For(_ types.NamespacedName, secret string, kubeconfig []byte) (*reconcile.Target, error) {
	cfg, server, err := destination.Parse(kubeconfig, d.parse)
	if err != nil {
		return nil, fmt.Errorf("Secret %s: %w", secret, err)
	}
	clients, err := destination.NewClients(cfg, d.scheme)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", server, err)
	}
	mapper := clients.Mapper
	probeConfig := rest.CopyConfig(cfg)
	probeConfig.Timeout = 5 * time.Second
	probe, err := discovery.NewDiscoveryClientForConfig(probeConfig)
	if err != nil {
		return nil, err
	}
	identities := impersonation.New(cfg, impersonation.Options[reconcile.Applier]{
		Build: func(cfg *rest.Config) (reconcile.Applier, error) {
			c, err := client.New(cfg, client.Options{Scheme: d.scheme, Mapper: mapper})
			if err != nil {
				return nil, err
			}
			return ssa.NewManager(c), nil
		},
		Exists: impersonation.ServiceAccountsIn(clients.Direct),
	})
	return &reconcile.Target{Name: secret, Server: server, Observer: informers.NewDirect(clients.Dynamic, mapper), Applier: ssa.NewManager(clients.Direct),
		Identities: identities, Mapper: mapper, Cluster: clusterinfo.New(clients.Discovery, 0),
		Reachable: func() error {
			if _, err := probe.ServerVersion(); err != nil {
				return destination.Unanswered(server, err)
			}
			return nil
		}}, nil
}

func (destinations) Release(types.NamespacedName) {}
