package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// metricValue scrapes the main controller and returns one series' value.
func metricValue(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := metricIfExposed(t, series)
	if !ok {
		t.Fatalf("series %s not exposed", series)
	}
	return v
}

// metricIfExposed scrapes the main controller for one series.
func metricIfExposed(t *testing.T, series string) (float64, bool) {
	t.Helper()
	return metricOf(t, controller, series)
}

// metricOf scrapes controller p for one series.
func metricOf(t *testing.T, p *controllerProcess, series string) (float64, bool) {
	t.Helper()
	var resp *http.Response
	eventually(t, 30*time.Second, "the metrics endpoint", func() (bool, string) {
		var err error
		resp, err = http.Get("http://" + p.metricsAddr + "/metrics")
		return err == nil, fmt.Sprint(err)
	})
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("series %s: %v", series, err)
			}
			return v, true
		}
	}
	return 0, false
}

func TestMetricsCountTicksAndPhaseFailures(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	const failures = `plumb_phase_failures_total{phase="read",reason="ReadFailed"}`
	const successes = `plumb_ticks_total{result="success"}`
	beforeFailures, beforeSuccesses := metricValue(t, failures), metricValue(t, successes)

	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "counted", url, nil)
	readyAt(t, ns, "counted", first)
	if got := metricValue(t, successes); got <= beforeSuccesses {
		t.Errorf("%s = %v after a successful tick, was %v", successes, got, beforeSuccesses)
	}

	_, badURL, _ := gitRepo(t, map[string]string{"deploy/config.yaml": "kind: ["})
	createApp(t, ns, "bad", badURL, nil)
	notReady(t, ns, "bad", "ReadFailed")
	eventually(t, 10*time.Second, "the failure to be counted", func() (bool, string) {
		got := metricValue(t, failures)
		return got > beforeFailures, fmt.Sprintf("%s = %v", failures, got)
	})

	// Per-App series, from each App's status: the Ready one, the one whose
	// Read phase fails, and none left for an App once it is deleted.
	app := func(series, name string, extra ...string) string {
		labels := fmt.Sprintf(`name=%q,namespace=%q`, name, ns)
		for _, e := range extra {
			labels += "," + e
		}
		return series + "{" + labels + "}"
	}
	for _, want := range []struct {
		series string
		value  float64
	}{
		{app("plumb_app_ready", "counted"), 1},
		{app("plumb_app_ready", "bad"), 0},
		{app("plumb_app_interval_seconds", "counted"), 600},
		{app("plumb_app_suspended", "counted"), 0},
		{fmt.Sprintf(`plumb_app_drifted_objects{drift_policy="heal",name="counted",namespace=%q}`, ns), 0},
		{app("plumb_app_consecutive_failures", "counted", `phase="read"`), 0},
	} {
		if got := metricValue(t, want.series); got != want.value {
			t.Errorf("%s = %v, want %v", want.series, got, want.value)
		}
	}
	if got := metricValue(t, `plumb_workqueue_adds_total{name="apps"}`); got < 2 {
		t.Errorf("the App queue's adds = %v, want at least the two Apps'", got)
	}
	if got := metricValue(t, app("plumb_app_consecutive_failures", "bad", `phase="read"`)); got < 1 {
		t.Errorf("the failing App's read failures in a row = %v, want at least 1", got)
	}
	counted := &plumbv1.App{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "counted"}, counted); err != nil {
		t.Fatal(err)
	}
	// The status holds whole seconds, and the ticking replica knows the
	// time to the nanosecond (and of ticks it did not write): at least the
	// status's, never in the future.
	if got := metricValue(t, app("plumb_app_last_success_timestamp_seconds", "counted")); counted.Status.LastSuccessfulTickTime == nil ||
		got < float64(counted.Status.LastSuccessfulTickTime.Unix()) || got > float64(time.Now().Unix()+1) {
		t.Errorf("last success %v, want at least the App's lastSuccessfulTickTime %v and not after now", got, counted.Status.LastSuccessfulTickTime)
	}
	if err := k8s.Delete(context.Background(), counted); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the deleted App's series to go", func() (bool, string) {
		_, exposed := metricIfExposed(t, app("plumb_app_ready", "counted"))
		return !exposed, "plumb_app_ready of the deleted App is still served"
	})
}

func TestMetricsCountSyncsByTriggerAndCommitToApplied(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	syncs := func(trigger string) string { return fmt.Sprintf(`plumb_syncs_total{trigger=%q}`, trigger) }
	const delivered = "plumb_commit_to_applied_seconds_count"
	before := map[string]float64{}
	for _, series := range []string{syncs("spec"), syncs("webhook"), syncs("manual"), syncs("drift"), syncs("timer"), delivered} {
		before[series] = metricValue(t, series)
	}
	grew := func(series, what string) {
		t.Helper()
		eventually(t, 10*time.Second, series+" to count "+what, func() (bool, string) {
			got := metricValue(t, series)
			return got > before[series], fmt.Sprintf("%s = %v, was %v", series, got, before[series])
		})
		before[series] = metricValue(t, series)
	}

	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "triggers", url, nil) // interval 10m: no timer tick during the test
	readyAt(t, ns, "triggers", first)
	grew(syncs("spec"), "the new App")
	if got := metricValue(t, delivered); got != before[delivered] {
		t.Errorf("%s = %v after an App's first revision, want %v (a first apply is no delivery)", delivered, got, before[delivered])
	}

	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "pushed")})
	headers, body := githubPush(t, url, ns)
	if code, answer := postHook(t, "github", headers, body); code != http.StatusAccepted {
		t.Fatalf("webhook answered %d %q", code, answer)
	}
	readyAt(t, ns, "triggers", second)
	grew(syncs("webhook"), "the push")
	grew(delivered, "the pushed revision")

	// A sync annotation written by hand (no plumb.dev/sync-requested-by
	// of the receiver's) is a manual sync.
	third := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "by-hand")})
	app := getApp(t, ns, "triggers")
	patch := client.MergeFrom(app.DeepCopy())
	app.Annotations[plumbv1.AnnotationSyncRequestedAt] = time.Now().Format(time.RFC3339Nano)
	delete(app.Annotations, plumbv1.AnnotationSyncRequestedBy)
	if err := k8s.Patch(context.Background(), app, patch); err != nil {
		t.Fatal(err)
	}
	readyAt(t, ns, "triggers", third)
	grew(syncs("manual"), "the annotation")

	cm, _ := getConfigMap(t, ns, "settings")
	cmPatch := client.MergeFrom(cm.DeepCopy())
	cm.Data["color"] = "changed-by-hand"
	if err := k8s.Patch(context.Background(), cm, cmPatch); err != nil {
		t.Fatal(err)
	}
	grew(syncs("drift"), "the changed ConfigMap")

	// A failing App is retried after a backoff: by the timer.
	_, badURL, _ := gitRepo(t, map[string]string{"deploy/config.yaml": "kind: ["})
	createApp(t, ns, "retried", badURL, nil)
	notReady(t, ns, "retried", "ReadFailed")
	grew(syncs("timer"), "the retry")
}
