package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// terms counts a controller's started and stopped terms of ticking.
func terms(p *controllerProcess) (started, stopped int) {
	log := p.tail(1_000_000)
	return strings.Count(log, "Started ticking"), strings.Count(log, "Stopped ticking")
}

func leading(p *controllerProcess) bool {
	started, stopped := terms(p)
	return started > stopped
}

func TestAnAPIServerOutageEndsTheTermNotTheProcess(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	args := []string{"--leader-elect=true", "--leader-election-id=plumb-e2e-outage", "--leader-election-namespace=" + ns,
		"--app-label-selector=e2e-shard=outage"}
	replicas := []*controllerProcess{startController(t, "outage-a", args...), startController(t, "outage-b", args...)}
	defer func() {
		for _, p := range replicas {
			if t.Failed() {
				t.Logf("log of a replica:\n%s", p.tail(80))
			}
			p.stop()
		}
	}()
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "outage", url, func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "outage"} })
	readyAt(t, ns, "outage", first)
	var leader *controllerProcess
	eventually(t, 60*time.Second, "one replica to lead", func() (bool, string) {
		for _, p := range replicas {
			if leading(p) {
				leader = p
			}
		}
		return leader != nil, "no leader"
	})

	// The API server goes away for 30 s: longer than the lease's renew
	// deadline (10 s), so the leader loses the lease while it is gone.
	stopped := time.Now()
	if err := cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the leader to lose the lease, 30 s into the outage", func() (bool, string) {
		lost := strings.Contains(leader.tail(1_000_000), "Lost the lease")
		return lost && time.Since(stopped) >= 30*time.Second, fmt.Sprintf("lost the lease: %v after %s", lost, time.Since(stopped).Round(time.Second))
	})
	if err := cluster.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	for _, p := range replicas {
		select {
		case err := <-p.exited:
			t.Fatalf("a replica exited during the outage: %v\n%s", err, p.tail(40))
		default:
		}
	}
	eventually(t, 90*time.Second, "exactly one replica to tick again", func() (bool, string) {
		n := 0
		for _, p := range replicas {
			if leading(p) {
				n++
			}
		}
		a1, a2 := terms(replicas[0])
		b1, b2 := terms(replicas[1])
		return n == 1, fmt.Sprintf("%d leading (terms a %d/%d, b %d/%d)", n, a1, a2, b1, b2)
	})

	t.Run("a drift made after the return is healed", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm, _ := getConfigMap(t, ns, "settings")
			cm.Data["color"] = "hand-made"
			return k8s.Update(context.Background(), cm, client.FieldOwner("kubectl-edit"))
		})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the drift to be healed", func() (bool, string) {
			cm, _ := getConfigMap(t, ns, "settings")
			return cm.Data["color"] == "blue", "color " + cm.Data["color"]
		})
	})

	t.Run("the outage was logged in short lines", func(t *testing.T) {
		for _, p := range replicas {
			eventLines := 0
			for _, line := range strings.Split(p.tail(1_000_000), "\n") {
				if len(line) > 1500 {
					t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
				}
				if strings.Contains(line, "Unable to write event") {
					eventLines++
				}
			}
			// At most one line per kind of failure every 30 s, over an outage of about 30 s.
			if eventLines > 10 {
				t.Errorf("%d lines say an Event could not be written, want a few (rate-limited)", eventLines)
			}
		}
	})
}
