package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestWithLeaderElectionOnlyOneControllerTicks(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	args := []string{"--leader-elect=true", "--leader-election-id=plumb-e2e-leader", "--leader-election-namespace=" + ns,
		"--app-label-selector=e2e-shard=leader"}
	first := startController(t, "leader-a", args...)
	second := startController(t, "leader-b", args...)
	stopped := map[*controllerProcess]bool{}
	defer func() {
		for _, p := range []*controllerProcess{first, second} {
			if t.Failed() {
				t.Logf("log of a controller:\n%s", p.tail(60))
			}
			if !stopped[p] {
				p.stop()
			}
		}
	}()
	ticking := func(p *controllerProcess) bool { return strings.Contains(p.tail(100000), "Started ticking") }

	var leader, follower *controllerProcess
	eventually(t, 60*time.Second, "one controller to lead", func() (bool, string) {
		switch {
		case ticking(first) && ticking(second):
			t.Fatal("both controllers tick")
		case ticking(first):
			leader, follower = first, second
		case ticking(second):
			leader, follower = second, first
		}
		return leader != nil, "no leader yet"
	})

	w, url, hash := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "led", url, func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "leader"} })
	readyAt(t, ns, "led", hash)
	if ticking(follower) {
		t.Fatal("the follower ticks while the leader holds the Lease")
	}
	t.Run("a push sent to the replica that does not lead converges", func(t *testing.T) {
		pushed := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "pushed")})
		headers, body := githubPush(t, url, ns+"-follower")
		code, answer, err := sendHookTo(follower.webhookAddr, "github", headers, body)
		if err != nil || code != http.StatusAccepted || !strings.Contains(answer, "matched 1 apps") {
			t.Fatalf("the follower answered %d %q, %v", code, answer, err)
		}
		readyAt(t, ns, "led", pushed) // the App's interval is 10 minutes
		if ticking(follower) {
			t.Error("the follower ticked")
		}
	})

	lease := &coordinationv1.Lease{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "plumb-e2e-leader"}, lease); err != nil {
		t.Fatalf("reading the Lease: %v", err)
	}

	t.Run("the follower takes over when the leader stops", func(t *testing.T) {
		if err := leader.stop(); err != nil {
			t.Errorf("the leader exited with %v on SIGTERM", err)
		}
		stopped[leader] = true
		eventually(t, 60*time.Second, "the follower to lead", func() (bool, string) { return ticking(follower), "not ticking" })
		next := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "red")})
		requestSync(t, ns, "led")
		readyAt(t, ns, "led", next)
	})
}
