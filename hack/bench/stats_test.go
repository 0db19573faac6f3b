package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestPercentileInterpolatesBetweenRanks(t *testing.T) {
	values := []float64{4, 1, 3, 2} // sorted: 1 2 3 4
	for _, tt := range []struct{ p, want float64 }{
		{0, 1}, {50, 2.5}, {100, 4}, {99, 3.97}, {25, 1.75},
	} {
		if got := percentileOf(values, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentileOf([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one value = %v, want 7", got)
	}
	if got := percentileOf(nil, 50); !math.IsNaN(got) {
		t.Errorf("p50 of nothing = %v, want NaN", got)
	}
	if values[0] != 4 {
		t.Error("percentileOf sorted its argument in place")
	}
}

func TestSpreadOfRuns(t *testing.T) {
	got := spreadOf([]float64{3, 1, 2, 10, 4})
	want := Spread{Median: 3, Min: 1, Max: 10, Runs: 5}
	if got != want {
		t.Errorf("spreadOf = %+v, want %+v", got, want)
	}
	if none := spreadOf(nil); none.Runs != 0 || !math.IsNaN(none.Median) {
		t.Errorf("spreadOf(nil) = %+v, want no runs and a NaN median", none)
	}
}

func TestReportTableAndJSON(t *testing.T) {
	atMost, met := goalAtMost(0.01)
	atLeast, metLeast := goalAtLeast(0.7)
	results := []result{{
		Key: "noop_requests_per_object", Plumb: spreadOf([]float64{0, 0, 0.001}),
		Baselines: map[string]Spread{"flux_style": spreadOf([]float64{2, 2.01}), "naive": spreadOf([]float64{2})},
		Goal:      atMost, Met: met, Note: "counted twice",
	}, {
		Key: "cold_sync_fraction_of_raw_ssa", Plumb: spreadOf([]float64{0.5}), Goal: atLeast, Met: metLeast,
	}, {
		Key: "not_measured", Plumb: spreadOf(nil), Goal: atMost, Met: met,
	}}
	var out bytes.Buffer
	writeTable(&out, results)
	table := out.String()
	for _, want := range []string{
		"| scenario | plumb | flux_style | argo_style | naive | ratio | goal | met |",
		"| `noop_requests_per_object` | 0 (0–0.001) | 2 (2–2.01) | n/a | 2 | 0 (vs flux_style) | ≤ 0.01 | yes |",
		"| `cold_sync_fraction_of_raw_ssa` | 0.5 | n/a | n/a | n/a | n/a | ≥ 0.7 | no |",
		"| `not_measured` | n/a | n/a | n/a | n/a | n/a | ≤ 0.01 | no |",
		"- `noop_requests_per_object`: counted twice",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	out.Reset()
	if err := writeJSON(&out, results); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("JSON is %d lines, want 1: %q", len(lines), out.String())
	}
	var figures map[string]*float64
	if err := json.Unmarshal([]byte(lines[0]), &figures); err != nil {
		t.Fatal(err)
	}
	if len(figures) != 3 || figures["noop_requests_per_object"] == nil || *figures["noop_requests_per_object"] != 0 ||
		*figures["cold_sync_fraction_of_raw_ssa"] != 0.5 || figures["not_measured"] != nil {
		t.Errorf("JSON figures = %s", lines[0])
	}
}

func TestProcReadsThisProcess(t *testing.T) {
	before, err := usageOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSSBytes < 1<<20 {
		t.Errorf("RSS of this test process = %d bytes, want at least 1 MiB", before.RSSBytes)
	}
	// Burn CPU until /proc shows it (its clock counts in hundredths).
	sink := 0
	for i := 0; ; i++ {
		sink += i % 7
		if i%1_000_000 == 0 {
			now, err := cpuOf([]int{os.Getpid()})
			if err != nil {
				t.Fatal(err)
			}
			if now > before.CPUSeconds {
				break
			}
		}
	}
	_ = sink
	if _, err := usageOf(1 << 30); err == nil {
		t.Error("usageOf a PID that cannot exist succeeded")
	}
}

func TestScrapeSumsTheSeriesAsked(t *testing.T) {
	text := `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",dry_run="",resource="configmaps",verb="GET"} 5
apiserver_request_total{code="200",dry_run="All",resource="configmaps",verb="APPLY"} 7
apiserver_request_total{code="200",dry_run="",resource="configmaps",verb="APPLY"} 2
apiserver_request_total{code="201",dry_run="",resource="configmaps",verb="POST"} 1
apiserver_request_total{code="200",dry_run="",resource="configmaps",verb="WATCH"} 3
apiserver_request_total{code="200",dry_run="",resource="leases",verb="PUT"} 11
`
	fams, err := families(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := objectRequests(fams, "configmaps"); got != 15 {
		t.Errorf("configmap requests = %v, want 15 (watches left out)", got)
	}
	if got := objectWrites(fams, "configmaps"); got != 3 {
		t.Errorf("configmap writes = %v, want 3 (dry runs and reads left out)", got)
	}
	if got := sumWhere(fams, "apiserver_request_total", nil); got != 29 {
		t.Errorf("all = %v, want 29", got)
	}
	if got := sumWhere(fams, "absent_total", nil); got != 0 {
		t.Errorf("absent family = %v, want 0", got)
	}
}

func TestRewrittenLeavesOutTheChangedObjects(t *testing.T) {
	before := map[string]string{"a": "1", "b": "2", "c": "3"}
	after := map[string]string{"a": "5", "b": "2", "c": "6"}
	if got := rewritten(before, after, map[string]bool{"a": true}); got != 1 {
		t.Errorf("rewritten = %d, want 1 (c)", got)
	}
}

func TestInParallelCallsEachOnceAndStopsAtAnError(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	if err := inParallel(100, 4, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if seen[i] != 1 {
			t.Fatalf("item %d done %d times, want once", i, seen[i])
		}
	}
	boom := errors.New("boom")
	calls := 0
	err := inParallel(1000, 1, func(i int) error {
		calls++
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if calls > 5 {
		t.Errorf("%d calls after the failure at the fourth, want the work to stop", calls)
	}
}

func TestRunsWithShare(t *testing.T) {
	if got := runsWithShare([]float64{0.05, 0.3}, []float64{0.04}, []float64{0, 1}); got != "0.05 (0.04; 0 GC), 0.3 (n/a; 1 GC)" {
		t.Errorf("runsWithShare = %q", got)
	}
}
