package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// unmanagedFigures are scenario 10: memory grown per object that the
// cluster gains but plumb does not manage.
type unmanagedFigures struct {
	objects int
	// plumb and argo are bytes of live heap grown per object; plumbRSS and
	// argoRSS the same from RSS.
	plumb, argo, plumbRSS, argoRSS float64
	// argoCached is how many objects argo_style's cache held.
	argoCached int
}

// heapWindow is how long the controller's live heap is watched before and
// after the objects are added: long enough for a timer tick of the steady
// App and the garbage collection that follows.
const heapWindow = tickInterval + 2*time.Second

// heapWait bounds the wait for a garbage collection.
const heapWait = 150 * time.Second

// heapSampling is how often the controller is made to collect garbage
// while its live heap is watched.
const heapSampling = 500 * time.Millisecond

// minLiveHeap watches the controller's live heap as of its last garbage
// collection (go_gc_heap_live_bytes) for at least heapWindow, making it
// collect every heapSampling (a heap profile with gc=1, on its pprof
// address) rather than waiting for collections that come when a tick
// allocates, and so mostly while one is under way; it returns the least
// seen: what its caches retain, with as little of a tick under way as
// possible, and never a figure from a collection before the watch (which
// may predate what is measured).
func minLiveHeap(ctx context.Context, ctl *controllerProcess) (float64, error) {
	least := math.Inf(1)
	began, first := time.Now(), -1.0
	for ; ; time.Sleep(heapSampling) {
		if err := ctl.collectGarbage(ctx); err != nil {
			return 0, err
		}
		fams, err := ctl.metrics(ctx)
		if err != nil {
			return 0, err
		}
		if _, ok := fams["go_gc_heap_live_bytes"]; !ok {
			return 0, fmt.Errorf("the controller serves no go_gc_heap_live_bytes")
		}
		cycles, err := gcCycles(fams)
		if err != nil {
			return 0, err
		}
		if first < 0 {
			first = cycles
		}
		if cycles > first {
			least = math.Min(least, sumWhere(fams, "go_gc_heap_live_bytes", nil))
			if time.Since(began) >= heapWindow {
				return least, nil
			}
		}
		if time.Since(began) > heapWait {
			return 0, fmt.Errorf("the controller collected no garbage in %s", heapWait)
		}
	}
}

// gcCycles is how many garbage collections a process has completed, from
// its go_gc_duration_seconds summary.
func gcCycles(fams map[string]*dto.MetricFamily) (float64, error) {
	fam, ok := fams["go_gc_duration_seconds"]
	if !ok || len(fam.GetMetric()) == 0 || fam.GetMetric()[0].GetSummary() == nil {
		return 0, fmt.Errorf("the controller serves no go_gc_duration_seconds summary")
	}
	return float64(fam.GetMetric()[0].GetSummary().GetSampleCount()), nil
}

// processMemory is a controller's live heap (see minLiveHeap) and its RSS
// right after.
type processMemory struct{ heap, rss float64 }

// memoryOf reads a controller's processMemory.
func memoryOf(ctx context.Context, ctl *controllerProcess) (processMemory, error) {
	heap, err := minLiveHeap(ctx, ctl)
	if err != nil {
		return processMemory{}, err
	}
	resident, err := rss(ctl.pid())
	return processMemory{heap: heap, rss: resident}, err
}

// ownLiveHeap collects this process's garbage and returns its live heap.
func ownLiveHeap() float64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return float64(sample[0].Value.Uint64())
}

// rss is a process's resident set.
func rss(pid int) (float64, error) {
	u, err := usageOf(pid)
	return float64(u.RSSBytes), err
}

// measureUnmanaged adds count ConfigMaps that no App manages (in a
// namespace of their own, about 500 bytes each) while plumb's controller
// runs, and compares its live heap before and after; then it starts
// argo_style's unfiltered cache of ConfigMaps in this process and compares
// this process's live heap before and after the cache is full. The objects
// are deleted at the end.
func measureUnmanaged(ctx context.Context, s *steadyApp, count int, logf func(string, ...any)) (*unmanagedFigures, error) {
	f := &unmanagedFigures{objects: count}
	ns, err := s.w.newNamespace(ctx, "bench-unmanaged")
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = s.w.k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}()
	logf("Watching the controller's live heap, then creating %d ConfigMaps that no App manages", count)
	before, err := memoryOf(ctx, s.ctl)
	if err != nil {
		return nil, err
	}
	if err := createConfigMaps(ctx, s.w.cluster.Config, ns, count); err != nil {
		return nil, err
	}
	after, err := memoryOf(ctx, s.ctl)
	if err != nil {
		return nil, err
	}
	f.plumb, f.plumbRSS = (after.heap-before.heap)/float64(count), (after.rss-before.rss)/float64(count)

	logf("Caching every ConfigMap as argo_style does")
	self := os.Getpid()
	argo, err := newArgoStyle(s.w.cluster.Config)
	if err != nil {
		return nil, err
	}
	defer argo.close()
	debug.FreeOSMemory()
	rssBefore, err := rss(self)
	if err != nil {
		return nil, err
	}
	heapBefore := ownLiveHeap()
	if err := argo.watch(ctx, configMapsResource); err != nil {
		return nil, err
	}
	f.argoCached = len(argo.informer[configMapsResource].GetStore().ListKeys())
	heapAfter := ownLiveHeap()
	debug.FreeOSMemory()
	rssAfter, err := rss(self)
	if err != nil {
		return nil, err
	}
	f.argo, f.argoRSS = (heapAfter-heapBefore)/float64(f.argoCached), (rssAfter-rssBefore)/float64(f.argoCached)
	return f, nil
}

// createConfigMaps creates count ConfigMaps of about payloadBytes each in
// ns, eight at a time.
func createConfigMaps(ctx context.Context, cfg *rest.Config, ns string, count int) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return inParallel(count, 8, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%05d", i)},
			Data: map[string]string{"value": "not plumb's", "payload": strings.Repeat("y", payloadBytes)}}
		_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
}

// results are scenario 10's row.
func (f *unmanagedFigures) results() result {
	goal, met := goalAtMost(50)
	return result{Key: "rss_bytes_per_unmanaged_object", Plumb: single(f.plumb),
		Baselines: map[string]Spread{"argo_style": single(f.argo)}, Goal: goal, Met: met,
		Note: fmt.Sprintf("memory the controller process gains per object when %d ConfigMaps of about 500 bytes that no App manages are created, measured as its live heap after garbage collection (go_gc_heap_live_bytes, the least seen over at least %s before and after, the harness making it collect garbage every 0.5s), since RSS moves by megabytes with each collection: RSS moved by %s bytes per object; argo_style: this process's live heap gained when its unfiltered cache of ConfigMaps fills, per object cached (%d), RSS %s bytes per object",
			f.objects, heapWindow, formatNumber(f.plumbRSS), f.argoCached, formatNumber(f.argoRSS)),
	}
}
