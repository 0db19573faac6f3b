package e2e

import (
	"strings"
	"testing"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestKustomizeAndHelmBuildsRunInTheRenderSandbox(t *testing.T) {
	setUp(t)
	t.Run("a kustomization converges", func(t *testing.T) {
		ns := newNamespace(t)
		_, url, first := gitRepo(t, map[string]string{
			"deploy/kustomization.yaml": "resources: [config.yaml]\nnamePrefix: k-\n",
			"deploy/config.yaml":        configMapYAML("settings", "blue"),
		})
		createApp(t, ns, "kustomized", url, nil)
		readyAt(t, ns, "kustomized", first)
		if cm, ok := getConfigMap(t, ns, "k-settings"); !ok || cm.Data["color"] != "blue" {
			t.Errorf("ConfigMap k-settings = %v", cm)
		}
	})
	t.Run("a chart that takes more memory than the sandbox has fails the read", func(t *testing.T) {
		ns := newNamespace(t)
		_, url, _ := gitRepo(t, map[string]string{
			"deploy/Chart.yaml":          "apiVersion: v2\nname: greedy\nversion: 1.0.0\n",
			"deploy/templates/cm.yaml":   "{{ len (until 400000000) }}\n", // 3.2 GB of numbers
			"deploy/templates/note.yaml": configMapYAML("note", "never"),
		})
		createApp(t, ns, "greedy", url, nil)
		app := notReady(t, ns, "greedy", plumbv1.ReasonReadFailed)
		if got := app.Status.Phases.Read.Reason; got != "LimitExceeded" || !strings.Contains(app.Status.Phases.Read.LastError, "render memory") {
			t.Errorf("read phase: %s %q, want LimitExceeded naming the render memory", got, app.Status.Phases.Read.LastError)
		}
		if _, applied := getConfigMap(t, ns, "note"); applied {
			t.Error("part of the chart was applied")
		}
	})
}
