package render

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// capabilityChart picks its PodDisruptionBudget's API version by the
// cluster's Kubernetes version, as many public charts do, and renders a
// ServiceMonitor only where the cluster serves that kind.
var capabilityChart = map[string]string{
	"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
	"c/templates/pdb.yaml": `{{- if semverCompare ">=1.21-0" .Capabilities.KubeVersion.GitVersion }}
apiVersion: policy/v1
{{- else }}
apiVersion: policy/v1beta1
{{- end }}
kind: PodDisruptionBudget
metadata: {name: web}
spec: {maxUnavailable: 1}
`,
	"c/templates/monitor.yaml": `{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web}
{{- end }}
`,
}

func TestHelmRendersForTheCapabilitiesItIsGiven(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts HelmOptions
		want []string
	}{
		{name: "a current cluster serving ServiceMonitors",
			opts: HelmOptions{KubeVersion: "v1.37.2", APIVersions: []string{"v1", "policy/v1", "policy/v1/PodDisruptionBudget",
				"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}},
			want: []string{"monitoring.coreos.com/v1 ServiceMonitor", "policy/v1 PodDisruptionBudget"}},
		{name: "a current cluster without them",
			opts: HelmOptions{KubeVersion: "v1.37.2", APIVersions: []string{"v1", "policy/v1"}},
			want: []string{"policy/v1 PodDisruptionBudget"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.ReleaseName, tt.opts.Namespace = "web", "team"
			_, objects, err := Render(context.Background(), treeOf(t, capabilityChart), "c", Options{Helm: tt.opts})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objects {
				got = append(got, o.GetAPIVersion()+" "+o.GetKind())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rendered objects (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a malformed version fails the render", func(t *testing.T) {
		_, _, err := Render(context.Background(), treeOf(t, capabilityChart), "c", Options{Helm: HelmOptions{KubeVersion: "one"}})
		if err == nil {
			t.Fatal("Render succeeded with KubeVersion \"one\"")
		}
	})
}
