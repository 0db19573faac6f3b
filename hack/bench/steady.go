package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// steadyApp is one App of many ConfigMaps, converged, with plumb's
// controller running: the setting of the per-tick scenarios. The
// baselines get the same objects in a namespace of their own.
type steadyApp struct {
	w          *world
	ctl        *controllerProcess
	ns, name   string
	repo       *repo
	objects    int
	files      map[string]string
	baselineNS string
	desired    []*unstructured.Unstructured // the baselines' objects
}

// payloadBytes makes each ConfigMap about the size of a small real one.
const payloadBytes = 400

// tickInterval is the App's fallback interval: the shortest the API allows,
// so that timer ticks come often.
const tickInterval = 10 * time.Second

var configMapsResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// newSteadyApp pushes n ConfigMaps, starts a controller and waits until the
// App is Ready and its timer ticks change nothing.
func newSteadyApp(ctx context.Context, w *world, n int, logf func(string, ...any)) (_ *steadyApp, err error) {
	s := &steadyApp{w: w, objects: n, name: "steady"}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.files = configMaps(n, payloadBytes, func(int) string { return "one" })
	var hash string
	if s.repo, hash, err = w.newRepo(s.files); err != nil {
		return nil, err
	}
	if s.ns, err = w.newNamespace(ctx, "bench-steady"); err != nil {
		return nil, err
	}
	if s.ctl, err = w.startController(ctx, "steady"); err != nil {
		return nil, err
	}
	logf("Applying an App of %d ConfigMaps", n)
	if err := w.createApp(ctx, s.ns, s.name, s.repo, tickInterval); err != nil {
		return nil, err
	}
	if err := w.readyAt(ctx, s.ns, s.name, hash, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, s.ctl.tail(20))
	}
	// The first tick's status write and informer events settle within a
	// timer tick or two.
	c, err := s.ctl.counters(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.ctl.waitTicks(ctx, c.Ticks+1, 3*tickInterval); err != nil {
		return nil, err
	}
	if s.baselineNS, err = w.newNamespace(ctx, "bench-baseline"); err != nil {
		return nil, err
	}
	if s.desired, err = desiredObjects(s.files, s.baselineNS); err != nil {
		return nil, err
	}
	return s, nil
}

// writingBaselines builds the two baselines that write (flux_style and
// naive), each with a fresh client that counts its requests.
func (s *steadyApp) writingBaselines() (*fluxStyle, *naive, error) {
	flux, err := newFluxStyle(s.w.cluster.Config, s.w.clientOptions())
	if err != nil {
		return nil, nil, err
	}
	naive, err := newNaive(s.w.cluster.Config, s.w.clientOptions())
	if err != nil {
		return nil, nil, err
	}
	return flux, naive, nil
}

func (s *steadyApp) close() {
	if s.ctl != nil {
		s.ctl.stop()
	}
}

// idleServerRate measures the CPU seconds per second that etcd and
// kube-apiserver use with nobody ticking, over window (the controller is
// frozen meanwhile).
func (s *steadyApp) idleServerRate(window time.Duration) (float64, error) {
	start, err := cpuOf(s.w.serverPIDs)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	time.Sleep(window)
	end, err := cpuOf(s.w.serverPIDs)
	if err != nil {
		return 0, err
	}
	return (end - start) / time.Since(began).Seconds(), nil
}

// serverRequests is kube-apiserver's count so far of requests about what
// a tick touches — the objects (ConfigMaps), Apps and their credentials
// Secrets — watches left out. kube-apiserver's own background requests
// (Leases, its own namespaces) are about other resources.
func (s *steadyApp) serverRequests(ctx context.Context) (float64, error) {
	fams, err := scrapeAPIServer(ctx, s.w.cluster.Config)
	if err != nil {
		return 0, err
	}
	return objectRequests(fams, "configmaps", "apps", "secrets"), nil
}

// serverWrites is kube-apiserver's count so far of writes of ConfigMaps.
func (s *steadyApp) serverWrites(ctx context.Context) (float64, error) {
	fams, err := scrapeAPIServer(ctx, s.w.cluster.Config)
	if err != nil {
		return 0, err
	}
	return objectWrites(fams, "configmaps"), nil
}

// resourceVersions maps each ConfigMap of ns to its resourceVersion.
func (s *steadyApp) resourceVersions(ctx context.Context, ns string) (map[string]string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("ConfigMapList")
	if err := s.w.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	rvs := map[string]string{}
	for _, item := range list.Items {
		rvs[item.GetName()] = item.GetResourceVersion()
	}
	return rvs, nil
}

// rewritten counts the objects of before whose resourceVersion moved,
// leaving out those named in changed.
func rewritten(before, after map[string]string, changed map[string]bool) int {
	n := 0
	for name, rv := range before {
		if !changed[name] && after[name] != rv {
			n++
		}
	}
	return n
}

func logTo(verbose bool) func(string, ...any) {
	return func(format string, args ...any) {
		if verbose {
			fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
}

// setInterval changes the App's fallback interval and waits until a tick
// has taken the change in (the App's observed generation).
func (s *steadyApp) setInterval(ctx context.Context, interval time.Duration) error {
	app := &plumbv1.App{}
	key := client.ObjectKey{Namespace: s.ns, Name: s.name}
	if err := s.w.k8s.Get(ctx, key, app); err != nil {
		return err
	}
	patch := client.MergeFrom(app.DeepCopy())
	app.Spec.Interval = &metav1.Duration{Duration: interval}
	if err := s.w.k8s.Patch(ctx, app, patch); err != nil {
		return err
	}
	generation := app.Generation
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.w.k8s.Get(ctx, key, app); err != nil {
			return false, nil
		}
		return app.Status.ObservedGeneration >= generation, nil
	})
}
