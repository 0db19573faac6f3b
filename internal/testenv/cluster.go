// Package testenv is what plumb's tests and `make demo` run on: a real,
// local Kubernetes control plane started from the binaries that
// hack/controlplane.sh builds — etcd and kube-apiserver (mode "api"), plus
// kube-controller-manager, kube-scheduler and kwok with one fake Node (mode
// "full") so that workloads really roll out; several clusters can run at
// once, each in its own temporary folder on free loopback ports — and the
// monitoring tools that hack/tools.sh builds (see ToolPath).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Mode selects which components run.
type Mode string

const (
	// ModeAPI runs etcd and kube-apiserver: enough for anything the API
	// server decides (validation, server-side apply, RBAC). Starts in seconds.
	ModeAPI Mode = "api"
	// ModeFull adds kube-controller-manager, kube-scheduler and kwok with one
	// fake Node, so Deployments create Pods that become Running and Ready.
	ModeFull Mode = "full"
)

// Options configure Start.
type Options struct {
	// Mode is ModeAPI (the default) or ModeFull.
	Mode Mode
	// CacheRoot is the root of the binaries cache; DefaultCacheRoot when empty.
	CacheRoot string
	// StartTimeout bounds the whole start; 2 minutes when zero.
	StartTimeout time.Duration
}

// Cluster is a running local control plane.
type Cluster struct {
	// Mode is what runs.
	Mode Mode
	// Config reaches the API server as an admin (group system:masters).
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file with the same admin credentials,
	// for kubectl and for the components.
	KubeconfigPath string
	// Dir is the cluster's temporary folder (kubeconfig, logs, certificates).
	Dir string
	// Binaries are the executables it runs (kubectl among them).
	Binaries Binaries

	env      *envtest.Environment
	procs    []*process // started in order; stopped in reverse
	logFiles map[string]*os.File
}

// stopGrace is how long etcd and kube-apiserver get to exit on SIGTERM.
const stopGrace = 5 * time.Second

// killedAfterGrace recognises envtest's report that a process did not exit
// within stopGrace and was killed: for a throwaway test cluster that is a
// clean enough stop.
func killedAfterGrace(err error) bool {
	return strings.Contains(err.Error(), "timeout waiting for process")
}

// nodeName is the fake Node that kwok manages in ModeFull.
const nodeName = "kwok-node-0"

// Start starts a local control plane. On error, everything it started has
// been stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Mode == "" {
		opts.Mode = ModeAPI
	}
	if opts.Mode != ModeAPI && opts.Mode != ModeFull {
		return nil, fmt.Errorf("unknown mode %q: want %q or %q", opts.Mode, ModeAPI, ModeFull)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	bins, err := FindBinaries(opts.CacheRoot, opts.Mode)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "plumb-cluster-")
	if err != nil {
		return nil, fmt.Errorf("creating the cluster folder: %w", err)
	}
	c := &Cluster{Mode: opts.Mode, Dir: dir, Binaries: bins, logFiles: map[string]*os.File{}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.logTails(40))
			_ = c.Stop()
		}
	}()
	for _, sub := range []string{c.logDir(), filepath.Join(dir, "etcd"), filepath.Join(dir, "pki")} {
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", sub, err)
		}
	}

	if err := c.startAPIServer(opts.StartTimeout); err != nil {
		return nil, err
	}
	if opts.Mode == ModeFull {
		if err := c.startWorkloadComponents(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) logDir() string { return filepath.Join(c.Dir, "logs") }

func (c *Cluster) openLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(c.logDir(), name+".log"))
	if err != nil {
		return nil, fmt.Errorf("creating log of %s: %w", name, err)
	}
	c.logFiles[name] = f
	return f, nil
}

// startAPIServer runs etcd and kube-apiserver through envtest, which also
// provisions serving certificates and the admin user.
func (c *Cluster) startAPIServer(timeout time.Duration) error {
	etcdLog, err := c.openLog("etcd")
	if err != nil {
		return err
	}
	apiLog, err := c.openLog("kube-apiserver")
	if err != nil {
		return err
	}
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    c.Binaries.Dir,
		ControlPlaneStartTimeout: timeout,
		// kube-apiserver waits for open watches on SIGTERM; after this grace
		// period it is killed (see killedAfterGrace).
		ControlPlaneStopTimeout: stopGrace,
		ControlPlane: envtest.ControlPlane{
			// Data and certificates live in the cluster's folder, so every
			// process names it on its command line and Stop removes them.
			Etcd: &envtest.Etcd{
				Out: etcdLog, Err: etcdLog, Path: c.Binaries.Path("etcd"),
				DataDir: filepath.Join(c.Dir, "etcd"),
			},
			APIServer: &envtest.APIServer{
				Out: apiLog, Err: apiLog, Path: c.Binaries.Path("kube-apiserver"),
				CertDir: filepath.Join(c.Dir, "pki"),
			},
		},
	}
	cfg, err := c.env.Start()
	if err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	c.Config = cfg
	c.KubeconfigPath = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, c.env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return nil
}

// startWorkloadComponents runs kube-controller-manager, kube-scheduler and
// kwok, waits until they are healthy, and registers the fake Node.
func (c *Cluster) startWorkloadComponents(ctx context.Context) error {
	kubeconfigFlags := []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--authentication-kubeconfig=" + c.KubeconfigPath,
		"--authorization-kubeconfig=" + c.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	kcmPort, err := freePort()
	if err != nil {
		return err
	}
	kcm, err := c.start("kube-controller-manager", append(kubeconfigFlags,
		"--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(c.Dir, "kube-controller-manager"),
		// The token controller needs a signing key; nothing here uses
		// legacy service-account token Secrets.
		"--controllers=*,-serviceaccount-token",
	))
	if err != nil {
		return err
	}
	schedulerPort, err := freePort()
	if err != nil {
		return err
	}
	scheduler, err := c.start("kube-scheduler", append(kubeconfigFlags,
		"--secure-port="+strconv.Itoa(schedulerPort),
		"--cert-dir="+filepath.Join(c.Dir, "kube-scheduler"),
	))
	if err != nil {
		return err
	}
	kwok, err := c.start("kwok", []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--config=" + c.Binaries.KwokStages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
		"--cidr=10.0.0.1/24",
		"--node-ip=10.0.0.1",
	})
	if err != nil {
		return err
	}
	if err := kcm.waitHealthy(ctx, kcmPort); err != nil {
		return fmt.Errorf("waiting for kube-controller-manager: %w", err)
	}
	if err := scheduler.waitHealthy(ctx, schedulerPort); err != nil {
		return fmt.Errorf("waiting for kube-scheduler: %w", err)
	}
	if err := registerFakeNode(ctx, c.Config, kwok); err != nil {
		return err
	}
	return nil
}

func (c *Cluster) start(name string, args []string) (*process, error) {
	p, err := startProcess(name, c.Binaries.Path(name), args, c.logDir())
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Stop stops every process the cluster started, newest first, and removes
// its folder. It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil && !killedAfterGrace(err) {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
		c.env = nil
	}
	for name, f := range c.logFiles {
		f.Close()
		delete(c.logFiles, name)
	}
	if c.Dir != "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
		c.Dir = ""
	}
	return errors.Join(errs...)
}

// WriteLogs writes the last lines of every component's log to w, each under
// a header naming the component.
func (c *Cluster) WriteLogs(w io.Writer, lines int) {
	_, _ = io.WriteString(w, c.logTails(lines))
}

func (c *Cluster) logTails(lines int) string {
	if c.Dir == "" {
		return ""
	}
	paths, _ := filepath.Glob(filepath.Join(c.logDir(), "*.log"))
	sort.Strings(paths)
	out := ""
	for _, path := range paths {
		out += fmt.Sprintf("----- last %d lines of %s -----\n%s", lines, filepath.Base(path), tail(path, lines))
	}
	return out
}

// AddUser provisions a user (a client certificate) in groups, and returns a
// kubeconfig file for it and its rest.Config. The user has no permissions
// beyond what RBAC grants its name or groups.
func (c *Cluster) AddUser(name string, groups []string) (string, *rest.Config, error) {
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		return "", nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return "", nil, fmt.Errorf("writing a kubeconfig for %s: %w", name, err)
	}
	path := filepath.Join(c.Dir, "kubeconfig-"+name)
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", nil, err
	}
	return path, user.Config(), nil
}

// StopAPIServer stops kube-apiserver (etcd and the other components keep
// running), as an outage or an upgrade would. StartAPIServer brings it back
// on the same address with the same certificates, so clients reconnect.
//
// kube-apiserver waits for open watches before it exits on SIGTERM, so after
// a short grace period it is killed, as a crash would end it.
func (c *Cluster) StopAPIServer() error {
	apiserver := c.env.ControlPlane.APIServer
	if err := apiserver.Stop(); err != nil && !killedAfterGrace(err) {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	// After a kill, wait until the port is free for the restart.
	addr := apiserver.SecureServing.ListenAddr.HostPort()
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return true, nil
		}
		conn.Close()
		return false, nil
	})
}

// StartAPIServer starts kube-apiserver again after StopAPIServer and waits
// until it serves.
func (c *Cluster) StartAPIServer() error {
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// Client is a client of the cluster as its admin for a test's own reads and
// writes, knowing client-go's kinds, CustomResourceDefinitions and plumb's
// App and Notification. A client that cannot be made fails the test.
func (c *Cluster) Client(t testing.TB) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, plumbv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return k8s
}
