package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// managedLabel marks the Apps of scenario 9; its controller ticks only
// those.
const managedLabel = "bench.plumb.dev/managed-memory"

// managedFigures are scenario 9: memory grown per byte of the objects
// plumb manages.
type managedFigures struct {
	apps, perApp int
	// jsonBytes is how many bytes of JSON the objects added take, as the
	// API server serves them (managedFields included).
	jsonBytes float64
	// plumb and argo are bytes of live heap grown per byte of JSON;
	// plumbRSS the same from RSS.
	plumb, plumbRSS, argo float64
}

// measureManaged creates apps Apps of one ConfigMap each, with a controller
// of their own, and reads its live heap once they are Ready; then pushes
// perApp ConfigMaps for each App (about payloadBytes each, as the other
// scenarios' objects), waits until every App is Ready at that commit, and
// reads the live heap again. The growth is divided by the growth of the
// objects' JSON. argo_style's unfiltered cache of the same namespace is
// measured in this process afterwards.
func measureManaged(ctx context.Context, w *world, apps, perApp int, logf func(string, ...any)) (*managedFigures, error) {
	f := &managedFigures{apps: apps, perApp: perApp}
	files := func(n int) map[string]string {
		out := map[string]string{}
		for a := range apps {
			for name, content := range configMaps(n, payloadBytes, func(int) string { return fmt.Sprint(a) }) {
				out[fmt.Sprintf("app-%02d/%s", a, name)] = content
			}
		}
		return out
	}
	r, _, err := w.newRepo(files(1))
	if err != nil {
		return nil, err
	}
	ns, err := w.newNamespace(ctx, "bench-managed")
	if err != nil {
		return nil, err
	}
	ctl, err := w.startController(ctx, "managed", "--app-label-selector", managedLabel+"=true")
	if err != nil {
		return nil, err
	}
	defer ctl.stop()
	// Each App holds one folder, so their objects' names collide: a
	// target namespace each keeps them apart.
	targets := make([]string, apps)
	for a := range apps {
		if targets[a], err = w.newNamespace(ctx, fmt.Sprintf("bench-managed-%02d", a)); err != nil {
			return nil, err
		}
		if err := w.createApp(ctx, ns, fmt.Sprintf("managed-%02d", a), r, tickInterval, func(app *plumbv1.App) {
			app.Spec.Source.Path = fmt.Sprintf("deploy/app-%02d", a)
			app.Spec.TargetNamespace = targets[a]
			app.Labels = map[string]string{managedLabel: "true"}
		}); err != nil {
			return nil, err
		}
	}
	if err := waitFleetReady(ctx, w, ns, apps, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, ctl.tail(20))
	}
	dyn, err := dynamic.NewForConfig(w.cluster.Config)
	if err != nil {
		return nil, err
	}
	jsonBefore, err := managedJSONBytes(ctx, dyn, targets)
	if err != nil {
		return nil, err
	}
	logf("Watching the controller's live heap with %d Apps of one ConfigMap", apps)
	before, err := memoryOf(ctx, ctl)
	if err != nil {
		return nil, err
	}

	logf("Pushing %d ConfigMaps for each of the %d Apps", perApp, apps)
	hash, err := r.push(files(perApp))
	if err != nil {
		return nil, err
	}
	for a := range apps {
		if err := w.requestSync(ctx, ns, fmt.Sprintf("managed-%02d", a)); err != nil {
			return nil, err
		}
	}
	for a := range apps {
		if err := w.readyAt(ctx, ns, fmt.Sprintf("managed-%02d", a), hash, 10*time.Minute); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, ctl.tail(20))
		}
	}
	jsonAfter, err := managedJSONBytes(ctx, dyn, targets)
	if err != nil {
		return nil, err
	}
	if want := apps * perApp; int(jsonAfter.objects) != want {
		return nil, fmt.Errorf("%d managed ConfigMaps found, want %d", int(jsonAfter.objects), want)
	}
	f.jsonBytes = jsonAfter.bytes - jsonBefore.bytes
	logf("Watching the controller's live heap with %d managed objects (%s bytes of JSON)", apps*perApp, formatNumber(jsonAfter.bytes))
	after, err := memoryOf(ctx, ctl)
	if err != nil {
		return nil, err
	}
	f.plumb, f.plumbRSS = (after.heap-before.heap)/f.jsonBytes, (after.rss-before.rss)/f.jsonBytes

	logf("Caching the same objects as argo_style does")
	argo, err := newArgoStyle(w.cluster.Config)
	if err != nil {
		return nil, err
	}
	defer argo.close()
	debug.FreeOSMemory()
	ownBefore := ownLiveHeap()
	cached := 0
	for _, target := range targets {
		if err := argo.watchIn(ctx, target, configMapsResource); err != nil {
			return nil, err
		}
		cached += argo.cached(target, configMapsResource)
	}
	if cached != int(jsonAfter.objects) {
		return nil, fmt.Errorf("argo_style cached %d ConfigMaps, want %d", cached, int(jsonAfter.objects))
	}
	f.argo = (ownLiveHeap() - ownBefore) / jsonAfter.bytes
	return f, nil
}

// jsonSize is how many objects a listing found and the bytes of their JSON.
type jsonSize struct{ objects, bytes float64 }

// managedJSONBytes lists the ConfigMaps of the namespaces and sums the
// JSON of each as the API server serves it.
func managedJSONBytes(ctx context.Context, dyn dynamic.Interface, namespaces []string) (jsonSize, error) {
	var size jsonSize
	for _, ns := range namespaces {
		list, err := dyn.Resource(configMapsResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: plumbv1.LabelAppName})
		if err != nil {
			return size, err
		}
		for _, item := range list.Items {
			data, err := json.Marshal(item.Object)
			if err != nil {
				return size, err
			}
			size.objects++
			size.bytes += float64(len(data))
		}
	}
	return size, nil
}

// results is scenario 9's row.
func (f *managedFigures) results() result {
	goal, met := goalAtMost(2)
	return result{Key: "rss_bytes_per_managed_object_byte", Plumb: single(f.plumb),
		Baselines: map[string]Spread{"argo_style": single(f.argo)}, Goal: goal, Met: met,
		Note: fmt.Sprintf("%d Apps grown from one to %d ConfigMaps each (%d managed objects, %s bytes of JSON as the API server serves them, managedFields included), a controller of their own: its live heap after garbage collection (go_gc_heap_live_bytes, the least seen over at least %s before and after, the harness making it collect garbage every 0.5s) grown per byte of JSON; RSS moved by %s bytes per byte; argo_style: this process's live heap gained per byte when an unfiltered cache of the same namespaces fills (its cache alone, where plumb's figure holds everything the controller keeps: its cache, the rendered objects, its records)",
			f.apps, f.perApp, f.apps*f.perApp, formatNumber(f.jsonBytes), heapWindow, formatNumber(f.plumbRSS)),
	}
}
