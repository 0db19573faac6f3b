package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestEverySeriesExistsAtZeroOnAPrivateRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP plumb_phase_failures_total Failed ticks by the phase that failed and its condition reason; phase health counts the ticks whose objects failed their health check, and the re-assessments between ticks that found it first.
# TYPE plumb_phase_failures_total counter
plumb_phase_failures_total{phase="apply",reason="ApplyFailed"} 0
plumb_phase_failures_total{phase="apply",reason="PruneFailed"} 0
plumb_phase_failures_total{phase="diff",reason="DiffFailed"} 0
plumb_phase_failures_total{phase="health",reason="HealthCheckFailed"} 0
plumb_phase_failures_total{phase="observe",reason="ObserveFailed"} 0
plumb_phase_failures_total{phase="read",reason="ReadFailed"} 0
# HELP plumb_ticks_total Ticks run, by result (success or failure).
# TYPE plumb_ticks_total counter
plumb_ticks_total{result="failure"} 0
plumb_ticks_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plumb_ticks_total", "plumb_phase_failures_total"); err != nil {
		t.Error(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
}

func TestObservations(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveTick(time.Second, "", "")
	m.ObserveTick(time.Second, "read", "ReadFailed")
	m.ObserveTick(time.Second, "read", "ReadFailed")
	m.ObservePhase("diff", 2*time.Millisecond)
	m.ObserveChange("created", 3)
	for _, tt := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.ticks.WithLabelValues("success"), 1},
		{m.ticks.WithLabelValues("failure"), 2},
		{m.phaseFailures.WithLabelValues("read", "ReadFailed"), 2},
		{m.changes.WithLabelValues("created"), 3},
	} {
		if got := testutil.ToFloat64(tt.c); got != tt.want {
			t.Errorf("got %v, want %v", got, tt.want)
		}
	}
	if got := testutil.CollectAndCount(m.tickDuration); got != 1 {
		t.Errorf("tick duration series = %d", got)
	}
}

func TestWebhookEventLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveWebhook("github", "push", 202, 2)
	m.ObserveWebhook("github", "package", 202, -1) // a package event with no tag, ignored
	if n := histogramCount(t, reg, "plumb_webhook_matched_apps"); n != 1 {
		t.Errorf("matched Apps observed %d times, want once: an ignored package event is no push", n)
	}
	m.ObserveWebhook("github", "anything-an-attacker-sends-1", 401, 0)
	m.ObserveWebhook("github", "anything-an-attacker-sends-2", 401, 0)
	if got := testutil.ToFloat64(m.webhooks.WithLabelValues("github", "other", "401")); got != 2 {
		t.Errorf("other events counted %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.webhooks); got != 2 {
		t.Errorf("%d series, want 2", got)
	}
	m.ServeWebhooks([]string{"github", "gitlab"})
	if got := testutil.CollectAndCount(m.webhooks); got != 2*4*len(webhookCodes) {
		t.Errorf("%d series for two served providers, want %d", got, 2*4*len(webhookCodes))
	}
	if got := testutil.ToFloat64(m.webhooks.WithLabelValues("gitlab", "push", "401")); got != 0 {
		t.Errorf("a served provider's rejections start at %v, want 0", got)
	}
}

func TestSyncsByTriggerStartAtZeroAndStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(m.syncs); got != 6 {
		t.Fatalf("%d trigger series before any tick, want 6", got)
	}
	m.ObserveSync("webhook")
	m.ObserveSync("webhook")
	m.ObserveSync("drift")
	m.ObserveSync("anything-else")
	for trigger, want := range map[string]float64{"webhook": 2, "drift": 1, "timer": 1, "manual": 0, "spec": 0, "dependency": 0} {
		if got := testutil.ToFloat64(m.syncs.WithLabelValues(trigger)); got != want {
			t.Errorf("syncs{trigger=%q} = %v, want %v", trigger, got, want)
		}
	}
	if got := testutil.CollectAndCount(m.syncs); got != 6 {
		t.Errorf("%d trigger series, want 6", got)
	}
}

func TestCommitToAppliedClampsAFutureCommitAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCommitToApplied(3 * time.Second)
	m.ObserveCommitToApplied(-time.Hour)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "plumb_commit_to_applied_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 2 || h.GetSampleSum() != 3 {
			t.Errorf("count %d sum %v, want 2 and 3", h.GetSampleCount(), h.GetSampleSum())
		}
		if b := h.GetBucket()[0]; b.GetUpperBound() != 1 || b.GetCumulativeCount() != 1 {
			t.Errorf("first bucket le=%v holds %d, want le=1 holding the clamped observation", b.GetUpperBound(), b.GetCumulativeCount())
		}
		return
	}
	t.Fatal("plumb_commit_to_applied_seconds not gathered")
}

// histogramCount is how many observations the histogram name holds.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
