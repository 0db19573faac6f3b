package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// postedAlert is one alert of a post to Alertmanager's API, as a receiver
// reads it, and whether it fires: ends later than a second after it
// arrived (a resolve ends when it was sent).
type postedAlert struct {
	Labels map[string]string `json:"labels"`
	EndsAt time.Time         `json:"endsAt"`
	fires  bool
}

// alertPosts are the alerts posted to s, in order.
func alertPosts(t *testing.T, s *sink) []postedAlert {
	t.Helper()
	var out []postedAlert
	for _, r := range s.requests() {
		var alerts []postedAlert
		if err := json.Unmarshal(r.body, &alerts); err != nil {
			t.Fatalf("a post to the Alertmanager sink: %v: %s", err, r.body)
		}
		for _, a := range alerts {
			a.fires = a.EndsAt.After(r.at.Add(time.Second))
			out = append(out, a)
		}
	}
	return out
}

// TestAReplicaThatLostTheLeaseRefreshesNoAlert: the leader opens an
// Alertmanager alert, freezes long enough to lose its Lease, and wakes up
// as a follower; the new leader resolves the alert. The old leader must
// not post it as firing again (its alerts ended with its term): the
// resolved alert stays resolved while the new leader keeps refreshing
// another App's alert, three times.
func TestAReplicaThatLostTheLeaseRefreshesNoAlert(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	args := []string{"--leader-elect=true", "--leader-election-id=plumb-e2e-handover", "--leader-election-namespace=" + ns,
		"--app-label-selector=e2e-shard=handover", "--notification-alert-refresh=1s"}
	first := startController(t, "handover-a", args...)
	ticking := func(p *controllerProcess) bool { return strings.Contains(p.tail(100000), "Started ticking") }
	eventually(t, 60*time.Second, "the first controller to lead", func() (bool, string) { return ticking(first), "not ticking" })
	second := startController(t, "handover-b", args...)
	defer func() {
		_ = first.cmd.Process.Signal(syscall.SIGCONT)
		for _, p := range []*controllerProcess{first, second} {
			if t.Failed() {
				t.Logf("log of a controller:\n%s", p.tail(80))
			}
			p.stop()
		}
	}()

	am := newSink(t, http.StatusOK)
	createNotification(t, ns, "am", plumbv1.SinkAlertmanager, am.URL, nil)
	shard := func(a *plumbv1.App) {
		a.Labels = map[string]string{"e2e-shard": "handover"}
		a.Spec.DriftPolicy = plumbv1.DriftPolicyAlert // drift stays, and so does its alert
	}
	_, url, hash := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("resolved", "blue")})
	createApp(t, ns, "resolved", url, shard)
	_, otherURL, otherHash := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("clock", "blue")})
	createApp(t, ns, "clock", otherURL, shard)
	readyAt(t, ns, "resolved", hash)
	readyAt(t, ns, "clock", otherHash)

	firing := func(a postedAlert, app string) bool { return a.Labels["name"] == app && a.fires }
	changeByHand(t, ns, "resolved", "red")
	eventually(t, 30*time.Second, "the first leader to post the alert and refresh it", func() (bool, string) {
		n := 0
		for _, a := range alertPosts(t, am) {
			if firing(a, "resolved") {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d firing posts", n)
	})

	// Frozen past the Lease's duration (15s): the second takes over.
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the second controller to lead", func() (bool, string) { return ticking(second), "not ticking" })
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the first controller to find its Lease lost", func() (bool, string) {
		return strings.Contains(first.tail(100000), "Stopped ticking"), "still ticking"
	})

	// The new leader finds the drift (it opens its own episode, and its own
	// alert), then resolves the alert once the drift ends.
	eventually(t, 60*time.Second, "the new leader to find the drift", func() (bool, string) {
		return strings.Contains(second.tail(100000), `"reason": "DriftDetected"`), "no DriftDetected in its log"
	})
	changeByHand(t, ns, "resolved", "blue")
	resolvedAt := -1
	eventually(t, 30*time.Second, "the new leader to resolve the alert", func() (bool, string) {
		for i, a := range alertPosts(t, am) {
			if a.Labels["name"] == "resolved" && !a.fires {
				resolvedAt = i
			}
		}
		return resolvedAt >= 0, "no resolve posted"
	})
	// The clock: the new leader refreshes another App's alert every second,
	// and the test waits for a refresh 3.5 s after the resolve (the old
	// leader, had it kept its alerts, would have posted the resolved one
	// again three times by then).
	changeByHand(t, ns, "clock", "red")
	eventually(t, 60*time.Second, "a refresh of the other App's alert 3.5 s after the resolve", func() (bool, string) {
		posts := am.requests()
		since := posts[resolvedAt].at
		for _, r := range posts[resolvedAt+1:] {
			if strings.Contains(string(r.body), `"name":"clock"`) && r.at.Sub(since) > 3500*time.Millisecond {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d posts after the resolve", len(posts)-resolvedAt-1)
	})
	for i, a := range alertPosts(t, am)[resolvedAt+1:] {
		if firing(a, "resolved") {
			t.Errorf("post %d after the resolve fires the resolved alert again (the replica that lost the Lease refreshes it)", resolvedAt+1+i)
		}
	}
}
