package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// coldFigures are scenario 8: objects per second of a cold sync of many
// Apps, and of raw server-side applies of as many objects just before.
type coldFigures struct {
	apps, perApp int
	plumb, raw   float64 // objects per second
	// requests is how many API requests per object the controller made
	// (informers' lists and watches left out).
	requests float64
	// rawServerCPU and plumbServerCPU are the CPU seconds kube-apiserver
	// and etcd spent per App's worth of objects in each run; plumbCPU is
	// the controller's own.
	rawServerCPU, plumbServerCPU, plumbCPU float64
}

// coldWorkers is how many raw applies run at once: as many as the
// controller's default --workers.
const coldWorkers = 4

// coldInterval is the fleet's fallback interval: long, so that after the
// cold sync the fleet's timer ticks do not disturb what is measured next.
const coldInterval = 10 * time.Minute

// measureColdSync first applies apps×perApp ConfigMaps with server-side
// apply from this process (coldWorkers at once, no client-side rate limit)
// and times it: the raw create rate of this cluster. Then, with plumb's
// controller frozen, it creates apps Apps, each of perApp ConfigMaps of its
// own folder of one repository, thaws the controller, and times until
// every object exists (a watch counts them).
func measureColdSync(ctx context.Context, s *steadyApp, apps, perApp int, logf func(string, ...any)) (*coldFigures, error) {
	f := &coldFigures{apps: apps, perApp: perApp}
	total := apps * perApp
	files := map[string]string{}
	var rawObjects []*unstructured.Unstructured
	payload := strings.Repeat("x", payloadBytes)
	for a := range apps {
		for o := range perApp {
			name := fmt.Sprintf("cold-%03d-%d", a, o)
			files[fmt.Sprintf("app-%03d/%s.yaml", a, name)] = fmt.Sprintf(
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: cold\n  payload: %q\n", name, payload)
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": name},
				"data":     map[string]any{"value": "cold", "payload": payload},
			}}
			rawObjects = append(rawObjects, u)
		}
	}

	rawNS, err := s.w.newNamespace(ctx, "bench-raw")
	if err != nil {
		return nil, err
	}
	logf("Raw server-side applies of %d ConfigMaps, %d at once", total, coldWorkers)
	serversBefore, err := cpuOf(s.w.serverPIDs)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := rawApply(ctx, s.w.k8s, rawNS, rawObjects); err != nil {
		return nil, fmt.Errorf("raw applies: %w", err)
	}
	f.raw = float64(total) / time.Since(began).Seconds()
	serversAfter, err := cpuOf(s.w.serverPIDs)
	if err != nil {
		return nil, err
	}
	f.rawServerCPU = (serversAfter - serversBefore) / float64(apps)

	r, _, err := s.w.newRepo(files)
	if err != nil {
		return nil, err
	}
	ns, err := s.w.newNamespace(ctx, "bench-cold")
	if err != nil {
		return nil, err
	}
	clientset, err := kubernetes.NewForConfig(s.w.cluster.Config)
	if err != nil {
		return nil, err
	}
	configMaps := clientset.CoreV1().ConfigMaps(ns)
	list, err := configMaps.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	before, err := s.ctl.counters(ctx) // a frozen process serves no metrics
	if err != nil {
		return nil, err
	}
	if err := s.ctl.pause(); err != nil {
		return nil, err
	}
	logf("Creating %d Apps of %d ConfigMaps each, the controller frozen", apps, perApp)
	for a := range apps {
		name := fmt.Sprintf("cold-%03d", a)
		if err := s.w.createApp(ctx, ns, name, r, coldInterval, func(app *plumbv1.App) {
			app.Spec.Source.Path = fmt.Sprintf("deploy/app-%03d", a)
		}); err != nil {
			s.ctl.resume()
			return nil, err
		}
	}
	watchCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	watcher, err := configMaps.Watch(watchCtx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		s.ctl.resume()
		return nil, err
	}
	defer watcher.Stop()
	logf("Thawing the controller: cold sync of %d objects", total)
	controller0, servers0, err := cpuSplit(s.ctl.pid(), s.w.serverPIDs)
	if err != nil {
		return nil, err
	}
	thawed := time.Now()
	if err := s.ctl.resume(); err != nil {
		return nil, err
	}
	last, err := lastOfConfigMaps(watcher, total, func(*corev1.ConfigMap) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("cold sync: %w\n%s", err, s.ctl.tail(20))
	}
	f.plumb = float64(total) / last.Sub(thawed).Seconds()
	controller1, servers1, err := cpuSplit(s.ctl.pid(), s.w.serverPIDs)
	if err != nil {
		return nil, err
	}
	f.plumbCPU = (controller1 - controller0) / float64(apps)
	f.plumbServerCPU = (servers1 - servers0) / float64(apps)
	if err := waitFleetReady(ctx, s.w, ns, apps, 5*time.Minute); err != nil {
		return nil, err
	}
	after, err := s.ctl.counters(ctx)
	if err != nil {
		return nil, err
	}
	f.requests = (after.TickRequests - before.TickRequests) / float64(total)
	return f, nil
}

// rawApply applies objects into ns with server-side apply, coldWorkers at
// once.
func rawApply(ctx context.Context, c client.Client, ns string, objects []*unstructured.Unstructured) error {
	return inParallel(len(objects), coldWorkers, func(i int) error {
		u := objects[i].DeepCopy()
		u.SetNamespace(ns)
		return c.Patch(ctx, u, client.Apply, client.FieldOwner("bench-raw"), client.ForceOwnership)
	})
}

// results are scenario 8's rows.
func (f *coldFigures) results() []result {
	goal, met := goalAtLeast(0.7)
	note := fmt.Sprintf("%d Apps × %d ConfigMaps created from nothing (one repository, a folder per App), from thawing the controller that was frozen while the Apps were created to the watch event of the last object; the controller runs with its default client-side rate limit (none, since the API server applies API Priority and Fairness) and made %s requests per object until every App was Ready (informers' lists and watches left out); raw: server-side applies of as many objects by the harness, %d at once, without a client-side rate limit, just before: %s objects/s. CPU per App: kube-apiserver and etcd %s ms for plumb's cold sync (its applies, the App's finalizer and status writes, Events, credentials), %s ms for the raw applies of as many objects; the controller's own %s ms",
		f.apps, f.perApp, formatNumber(f.requests), coldWorkers, formatNumber(f.raw),
		formatNumber(f.plumbServerCPU*1000), formatNumber(f.rawServerCPU*1000), formatNumber(f.plumbCPU*1000))
	return []result{
		{Key: "cold_sync_objects_per_second", Plumb: single(f.plumb), Note: note},
		{Key: "cold_sync_fraction_of_raw_ssa", Plumb: single(f.plumb / f.raw), Goal: goal, Met: met, Note: note},
	}
}
