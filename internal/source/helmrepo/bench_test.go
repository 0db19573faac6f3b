package helmrepo_test

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/repo"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
)

// peakHeap runs f and samples the heap's objects (live and not yet
// collected) every 100µs, returning the highest sample above the heap
// before f ran. It runs f with GOGC=10: at the default of 100 the
// collector lets the heap grow by the size of everything else the
// process holds (a test binary's libraries, a controller's caches), and
// the peak would measure that, not the reading.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var (
		peak uint64
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}

// BenchmarkIndex50MB reads a 50 MB index (as helm writes it) three ways,
// each reporting its peak heap per index byte: plumb's streamed
// ParseIndex; Flux-style, helm's repo.LoadIndexFile (read whole, then
// sigs.k8s.io/yaml, as source-controller does); and a plain yaml.Unmarshal
// of the same bytes. Issue 31's goal is at most 2 bytes of heap per index
// byte for plumb's.
func BenchmarkIndex50MB(b *testing.B) {
	file := filepath.Join(b.TempDir(), "index.yaml")
	size := writeLargeIndex(b, file, 50<<20)
	measure := func(b *testing.B, read func(b *testing.B)) {
		var peak uint64
		b.ReportAllocs()
		for b.Loop() {
			peak = max(peak, peakHeap(func() { read(b) }))
		}
		b.ReportMetric(float64(size)/(1<<20), "index-MiB")
		b.ReportMetric(float64(peak)/float64(size), "peak-heap-B/index-B")
	}
	b.Run("plumb-streamed", func(b *testing.B) {
		measure(b, func(b *testing.B) {
			f, err := os.Open(file)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			index, err := helmrepo.ParseIndex(f, helmrepo.DefaultIndexLimits())
			if err != nil || index.Versions() == 0 {
				b.Fatalf("%d versions, %v", index.Versions(), err)
			}
			runtime.KeepAlive(index)
		})
	})
	b.Run("flux-style-LoadIndexFile", func(b *testing.B) {
		measure(b, func(b *testing.B) {
			index, err := repo.LoadIndexFile(file)
			if err != nil || len(index.Entries) == 0 {
				b.Fatal(err)
			}
			runtime.KeepAlive(index)
		})
	})
	b.Run("plain-yaml.Unmarshal", func(b *testing.B) {
		measure(b, func(b *testing.B) {
			data, err := os.ReadFile(file)
			if err != nil {
				b.Fatal(err)
			}
			var index map[string]any
			if err := yaml.Unmarshal(data, &index); err != nil {
				b.Fatal(err)
			}
			runtime.KeepAlive(index)
		})
	})
}

// writeLargeIndex writes an index as helm writes it, of at least size
// bytes, to file, and returns its size.
func writeLargeIndex(tb testing.TB, file string, size int64) int64 {
	tb.Helper()
	// One version's entry in helmIndex is about 570 bytes.
	versions := 100
	charts := int(size/550/int64(versions)) + 1
	index := helmIndex(tb, charts, versions)
	if err := index.WriteFile(file, 0o644); err != nil {
		tb.Fatal(err)
	}
	info, err := os.Stat(file)
	if err != nil {
		tb.Fatal(err)
	}
	if info.Size() < size*9/10 {
		tb.Fatalf("wrote %d bytes, want about %d", info.Size(), size)
	}
	runtime.GC()
	return info.Size()
}
