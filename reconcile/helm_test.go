package reconcile

import (
	"context"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
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
	ready(t, h.tick(t, client.ObjectKeyFromObject(app), queue.TriggerTimer))
	if err := admin(t).Get(context.Background(), client.ObjectKey{Namespace: app.Namespace, Name: "web"}, &policyv1.PodDisruptionBudget{}); err != nil {
		t.Errorf("the PodDisruptionBudget was not applied as policy/v1: %v", err)
	}
}
