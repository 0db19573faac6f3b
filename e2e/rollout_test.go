package e2e

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/source/git/gittest"
)

// ticksOf counts the controller's finished ticks of App ns/name in its log.
func ticksOf(p *controllerProcess, ns, name string) int {
	n := 0
	for _, line := range strings.Split(p.tail(1_000_000), "\n") {
		if strings.Contains(line, `"app": "`+ns+"/"+name+`"`) && (strings.Contains(line, "\tTicked\t") || strings.Contains(line, "\tTick failed\t")) {
			n++
		}
	}
	return n
}

func TestADeploymentRollingOutCostsAtMostOneTickAndNoGitRequest(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/web.yaml": scaledDeployment})
	repo := path.Base(url)
	createApp(t, ns, "rollout", url, nil) // interval 10m: no timer tick during the test
	readyAt(t, ns, "rollout", first)
	ticks, lsRemotes := ticksOf(controller, ns, "rollout"), gitServer.RequestCounts(repo)[gittest.RequestListRefs]

	// kube-controller-manager rolls the Deployment out on kwok's node: its
	// status is written again and again until both replicas are available.
	deployment := &appsv1.Deployment{}
	eventually(t, 90*time.Second, "the Deployment to roll out", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, deployment); err != nil {
			return false, err.Error()
		}
		s := deployment.Status
		return s.AvailableReplicas == 2 && s.UpdatedReplicas == 2 && s.ObservedGeneration == deployment.Generation,
			fmt.Sprintf("%d of 2 available", s.AvailableReplicas)
	})
	if got := ticksOf(controller, ns, "rollout") - ticks; got > 1 {
		t.Errorf("the rollout caused %d ticks, want at most 1", got)
	}
	if got := gitServer.RequestCounts(repo)[gittest.RequestListRefs] - lsRemotes; got != 0 {
		t.Errorf("the rollout caused %d ls-remotes, want 0", got)
	}
}
