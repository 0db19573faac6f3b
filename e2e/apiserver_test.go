package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestTheLoopSurvivesAnAPIServerRestart(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "restart", url, func(a *plumbv1.App) { a.Spec.Interval = &metav1.Duration{Duration: 10 * time.Second} })
	readyAt(t, ns, "restart", first)

	start := time.Now()
	if err := cluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver stopped in %s", time.Since(start).Round(time.Millisecond))
	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "red")})
	if err := cluster.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	// No sync request and no controller restart: the loop finds its way back.
	readyAt(t, ns, "restart", second)
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "red" {
		t.Errorf("settings.color = %q after the restart, want red", cm.Data["color"])
	}
	select {
	case err := <-controller.exited:
		t.Fatalf("the controller exited during the API server restart: %v", err)
	default:
	}
}
