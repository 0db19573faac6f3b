package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue scrapes the main controller and returns one series' value.
func metricValue(t *testing.T, series string) float64 {
	t.Helper()
	var resp *http.Response
	eventually(t, 30*time.Second, "the metrics endpoint", func() (bool, string) {
		var err error
		resp, err = http.Get("http://" + controller.metricsAddr + "/metrics")
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
			return v
		}
	}
	t.Fatalf("series %s not exposed", series)
	return 0
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
}
