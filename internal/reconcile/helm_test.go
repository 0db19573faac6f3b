package reconcile

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/queue"
)

func TestAHelmChartRendersForTheClusterItIsAppliedTo(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/Chart.yaml": "apiVersion: v2\nname: web\nversion: 1.0.0\n",
		// As many public charts do: pick the API by the cluster's version,
		// and render what needs a kind only where the cluster serves it.
		"deploy/templates/pdb.yaml": `{{- if semverCompare ">=1.21-0" .Capabilities.KubeVersion.GitVersion }}
apiVersion: policy/v1
{{- else }}
apiVersion: policy/v1beta1
{{- end }}
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
`,
		"deploy/templates/monitor.yaml": `{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web}
{{- end }}
`,
	})
	app := newApp(t, repo, nil)
	h := newHarness(t)
	ready(t, h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer))
	if err := admin(t).Get(context.Background(), client.ObjectKey{Namespace: app.Namespace, Name: "web"}, &policyv1.PodDisruptionBudget{}); err != nil {
		t.Errorf("the PodDisruptionBudget was not applied as policy/v1: %v", err)
	}
}

// TestHelmTestHooksAreLeftOutAndNamed: as Helm's own install does, a
// chart's test hooks (podinfo has three) are not applied — not as
// ordinary objects, not waited for — and an Event names them and why,
// once per render; other hooks keep being applied as ordinary objects
// until plumb runs hooks.
func TestHelmTestHooksAreLeftOutAndNamed(t *testing.T) {
	pod := func(name, hook string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {"helm.sh/hook": %q}
spec:
  restartPolicy: Never
  containers: [{name: test, image: curlimages/curl, command: [curl, http://web:9898]}]
`, name, hook)
	}
	_, repo := newRepo(t, map[string]string{
		"deploy/Chart.yaml":                            "apiVersion: v2\nname: web\nversion: 1.0.0\n",
		"deploy/templates/configmap.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {color: blue}\n",
		"deploy/templates/tests/test-connection.yaml":  pod("web-grpc-test", "test"),
		"deploy/templates/tests/test-legacy.yaml":      pod("web-service-test", "test-success"),
		"deploy/templates/tests/test-spaced.yaml":      pod("web-jwt-test", " test "),
		"deploy/templates/hooks/pre-install.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-pre\n  annotations: {\"helm.sh/hook\": \"pre-install,pre-upgrade\"}\n",
		"deploy/templates/hooks/install-and-test.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-both\n  annotations: {\"helm.sh/hook\": \"pre-install,test\"}\n",
	})
	app := newApp(t, repo, nil)
	h := newHarness(t)
	key := client.ObjectKeyFromObject(app)
	ready(t, h.tick(t, key, queue.WakeTimer))
	ctx := context.Background()
	for _, name := range []string{"web-grpc-test", "web-service-test", "web-jwt-test"} {
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: name}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("test hook Pod %s: %v, want it never created", name, err)
		}
	}
	for _, name := range []string{"web", "web-pre", "web-both"} {
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s (ordinary, or a hook of other events) not applied: %v", name, err)
		}
	}
	events := h.recorded()
	if n := countContaining(events, "Normal LeftOut", "not applied, as Helm test hooks (helm.sh/hook: test), which Helm creates only on helm test",
		"Pod web-grpc-test (helm deploy/templates/tests/test-connection.yaml", "Pod web-service-test", "Pod web-jwt-test"); n != 1 {
		t.Errorf("LeftOut Events naming the three test hooks = %d, want 1; all: %q", n, events)
	}
	if countContaining(events, "LeftOut", "web-both") != 0 || countContaining(events, "LeftOut", "web-pre") != 0 {
		t.Errorf("a LeftOut Event names a hook that is applied: %q", events)
	}
	// The next tick reads the cached render: it says nothing again.
	ready(t, h.tick(t, key, queue.WakeTimer))
	if events := h.recorded(); countContaining(events, "LeftOut") != 0 {
		t.Errorf("a tick of the cached render repeated the LeftOut Event: %q", events)
	}
}
