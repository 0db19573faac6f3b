package e2e

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// ticksOf counts the controller's finished ticks of App ns/name in its log.
func ticksOf(p *controllerProcess, ns, name string) int {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"app": "`+ns+"/"+name+`"`) && (strings.Contains(line, "\tTicked\t") || strings.Contains(line, "\tTick failed\t")) {
			n++
		}
	}
	return n
}

func TestADeploymentRollingOutCostsAtMostOneTickAndNoGitRequest(t *testing.T) {
	// Counted from the App's creation: the first tick (with the only Git
	// read), then whatever the rollout causes.
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	repo := path.Base(url)
	// A fetch makes a ref advertisement too: ls-remotes are list-refs
	// requests beyond the fetches'.
	lsRemotes := func() int {
		counts := gitServer.RequestCounts(repo)
		return counts[gittest.RequestListRefs] - counts[gittest.RequestFetch]
	}
	before := lsRemotes()
	createApp(t, ns, "rollout", url, nil) // interval 10m: no timer tick during the test
	readyAt(t, ns, "rollout", first)

	// The App's first tick created the Deployment, so the whole rollout
	// comes after it: kube-controller-manager rolls it out on kwok's node,
	// writing its status again and again until both replicas are available.
	deployment := &appsv1.Deployment{}
	eventually(t, 90*time.Second, "the Deployment to roll out", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, deployment); err != nil {
			return false, err.Error()
		}
		s := deployment.Status
		return s.AvailableReplicas == 2 && s.UpdatedReplicas == 2 && s.ObservedGeneration == deployment.Generation,
			fmt.Sprintf("%d of 2 available", s.AvailableReplicas)
	})
	if got := ticksOf(controller, ns, "rollout"); got < 1 || got > 2 {
		t.Errorf("the App ticked %d times (its first tick, then the rollout), want the first and at most 1 more", got)
	}
	if got := lsRemotes() - before; got != 1 {
		t.Errorf("%d ls-remotes, want only the first tick's", got)
	}
}
