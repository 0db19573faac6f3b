package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/webhook"
)

const releaseNamespace = "plumb-system"

// loadChart loads the chart from this folder.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(".")
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// values parses a YAML value set.
func values(t *testing.T, text string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("value set %q: %v", text, err)
	}
	return v
}

// render renders the chart as `helm template` does, and returns its objects.
func render(t *testing.T, vals map[string]any) ([]*unstructured.Unstructured, string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "plumb", releaseNamespace
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return nil, "", err
	}
	return parseManifest(t, rel.Manifest), rel.Info.Notes, nil
}

func parseManifest(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objects []*unstructured.Unstructured
	files := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(files[k]), &u.Object); err != nil {
			t.Fatalf("a rendered document is no YAML object: %v\n%s", err, files[k])
		}
		if len(u.Object) > 0 {
			objects = append(objects, u)
		}
	}
	return objects
}

// valueSets are the sets the chart is rendered and dry-run with.
var valueSets = map[string]string{
	"defaults":   ``,
	"shards":     "shards: 3\nreplicas: 1",
	"namespaces": "rbac: {mode: namespaces, namespaces: [team-a, team-b]}",
	"none":       "rbac: {mode: none}\ncontroller: {defaultServiceAccount: plumb-app}",
	"ingress": `webhook:
  providers: [github, gitlab]
  ingress: {enabled: true, className: nginx, host: plumb.example.com, tlsSecretName: plumb-tls,
    annotations: {cert-manager.io/cluster-issuer: letsencrypt}}`,
	"monitoring":     "metrics: {serviceMonitor: {enabled: true, labels: {release: prometheus}}, prometheusRule: {enabled: true}}",
	"networkPolicy":  "networkPolicy: {enabled: true, webhookFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}}]}",
	"existingSecret": "replicas: 1\nimage: {digest: 'sha256:" + strings.Repeat("ab", 32) + "'}\nwebhook: {providers: [github, gitea], secret: {existingSecret: my-hooks}}",
	"dashboard": `dashboard:
  enabled: true
  proxyContainers:
    - name: oauth2-proxy
      image: quay.io/oauth2-proxy/oauth2-proxy:v7.6.0
      args: [--http-address=0.0.0.0:4180, --upstream=unix:///run/plumb-dashboard/ui.sock, --provider=github, --github-org=acme, --email-domain=*,
        --pass-user-headers=true, --set-xauthrequest=false, --client-id=plumb, --client-secret-file=/etc/oauth2-proxy/client-secret,
        --cookie-secret-file=/etc/oauth2-proxy/cookie-secret]
      ports: [{name: http, containerPort: 4180}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}`,
	"dashboardTLS": "dashboard: {enabled: true, addr: ':9443', trustedProxies: [], tls: {secretName: dashboard-tls, clientCASecretName: proxy-ca, clientCertNames: [oauth2-proxy.auth.svc]}, service: {targetPort: 9443}}",
	"everything": `controller: {workers: 8, logLevel: debug, logEncoding: console, appLabelSelector: "shard=a", defaultServiceAccount: deployer,
  noCrossNamespace: true, notificationBlockedCIDRs: [10.0.0.0/8], notificationBlockDefaultCIDRs: false, allowInsecureRegistries: true, extraArgs: ["--pprof-addr=127.0.0.1:6060"],
  noRemoteClusters: true, maxDestinations: 5, maxDestinationKinds: 6, maxDestinationsPerNamespace: 3, destinationBlockedCIDRs: [10.9.0.0/16, 10.8.0.0/16], destinationBlockDefaultCIDRs: false,
  readLimits: {maxRepositoryFiles: 11, maxRepositoryBytes: 12, maxFileBytes: 13, maxObjects: 14, maxFetchBytes: 15},
  renderTimeout: 3m, renderMemoryBytes: 536870912, renderCacheBytes: 1048576, shutdownTimeout: 50s, kubeAPIQPS: 20, kubeAPIBurst: 40}
webhook: {maxBodyBytes: 2048}
rbac: {extraRules: [{apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch, create, patch, delete]}]}`,
}

func TestTheChartLintsAndRendersWithEveryValueSet(t *testing.T) {
	for name, set := range valueSets {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Namespace = releaseNamespace
			result := lint.Run([]string{"."}, values(t, set))
			for _, msg := range result.Messages {
				if msg.Severity > 1 { // warnings and errors; info is fine
					t.Errorf("helm lint: %s", msg)
				}
			}
			for _, err := range result.Errors {
				t.Errorf("helm lint: %v", err)
			}
			objects, notes, err := render(t, values(t, set))
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			if len(objects) == 0 || !strings.Contains(notes, "/hooks/github") && !strings.Contains(notes, "github is not in") {
				t.Errorf("rendered %d objects; NOTES:\n%s", len(objects), notes)
			}
			for _, rule := range rulesOf(objects) {
				if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") {
					t.Errorf("a rule grants %v on %v: no wildcard by default", rule.Verbs, rule.Resources)
				}
			}
		})
	}
}

// rule is a PolicyRule as rendered, with where it applies.
type rule struct {
	Role      string   // kind/namespace/name of the role
	APIGroups []string `json:"apiGroups"`
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
	// ResourceNames, when set, limit the rule to these objects.
	ResourceNames []string `json:"resourceNames"`
}

func rulesOf(objects []*unstructured.Unstructured) []rule {
	var out []rule
	for _, o := range objects {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		data, _ := json.Marshal(o.Object["rules"])
		var rules []rule
		_ = json.Unmarshal(data, &rules)
		for i := range rules {
			rules[i].Role = o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		}
		out = append(out, rules...)
	}
	return out
}

func find(objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objects {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func kinds(objects []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objects {
		out = append(out, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

// args are the rendered Deployment's container arguments.
func args(t *testing.T, objects []*unstructured.Unstructured) []string {
	t.Helper()
	d := find(objects, "Deployment", "")
	if d == nil {
		t.Fatal("no Deployment rendered")
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	out, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return out
}

func TestTheNotesSayHowToWireAGitHubWebhook(t *testing.T) {
	_, notes, err := render(t, values(t, valueSets["ingress"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Payload URL:  https://plumb.example.com/hooks/github",
		"kubectl -n plumb-system get secret plumb-webhook -o jsonpath='{.data.github}' | base64 -d",
		"kind: App", "kubectl get apps -A", "Apps that name no ServiceAccount act with plumb's own rights"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	_, notes, err = render(t, values(t, "webhook: {secret: {existingSecret: my-hooks}}"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "get secret my-hooks") || !strings.Contains(notes, "port-forward svc/plumb-webhook") {
		t.Errorf("NOTES without an Ingress and with an existing Secret:\n%s", notes)
	}
	_, notes, err = render(t, values(t, valueSets["none"]))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(notes, "act with plumb's own rights") {
		t.Errorf("NOTES warn that Apps act with plumb's rights, though defaultServiceAccount is set:\n%s", notes)
	}
	_, notes, err = render(t, values(t, valueSets["namespaces"]))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "Apps may place objects only in their own namespace") {
		t.Errorf("NOTES of mode namespaces do not say that --no-cross-namespace is on:\n%s", notes)
	}
}

func TestTheDefaultsRunARestrictedPodWithLeaderElection(t *testing.T) {
	objects, _, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := find(objects, "Deployment", "plumb")
	if d == nil {
		t.Fatalf("no Deployment plumb in %v", kinds(objects))
	}
	want := map[string]any{
		"spec.replicas": int64(2),
		"spec.template.spec.automountServiceAccountToken":                                             false,
		"spec.template.spec.securityContext.runAsNonRoot":                                             true,
		"spec.template.spec.securityContext.runAsUser":                                                int64(65532),
		"spec.template.spec.securityContext.seccompProfile.type":                                      "RuntimeDefault",
		"spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution": nil, // present
	}
	for path, value := range want {
		got, found, _ := unstructured.NestedFieldNoCopy(d.Object, strings.Split(path, ".")...)
		if !found || value != nil && fmt.Sprint(got) != fmt.Sprint(value) {
			t.Errorf("%s = %v (found %v), want %v", path, got, found, value)
		}
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	for path, value := range map[string]any{
		"securityContext.readOnlyRootFilesystem":   true,
		"securityContext.allowPrivilegeEscalation": false,
		"securityContext.capabilities.drop":        []any{"ALL"},
		"livenessProbe.httpGet.path":               "/healthz",
		"readinessProbe.httpGet.path":              "/readyz",
		"resources.requests.memory":                "256Mi",
	} {
		got, found, _ := unstructured.NestedFieldNoCopy(c, strings.Split(path, ".")...)
		if !found || fmt.Sprint(got) != fmt.Sprint(value) {
			t.Errorf("container %s = %v, want %v", path, got, value)
		}
	}
	a := args(t, objects)
	for _, flag := range []string{"controller", "--leader-elect=true", "--leader-election-namespace=plumb-system", "--workers=4",
		"--git-cache-dir=/var/cache/plumb/git", "--webhook-secret-file=github=/etc/plumb/webhook/github", "--max-objects=5000"} {
		if !slices.Contains(a, flag) {
			t.Errorf("args %v lack %s", a, flag)
		}
	}
	if slices.Contains(a, "--no-cross-namespace") {
		t.Errorf("args %v: --no-cross-namespace is on by default only in mode namespaces", a)
	}
	if slices.Contains(a, "--allow-insecure-registries") {
		t.Errorf("args %v: plain HTTP registries are allowed by default", a)
	}
	for _, flag := range a {
		if strings.HasPrefix(flag, "--notification-block") || strings.HasPrefix(flag, "--destination-block") {
			t.Errorf("args %v: %s by default, want plumb's own default ranges blocked and none more", a, flag)
		}
	}
	// The cluster-scoped RBAC carries the namespace in its name, and the
	// binding names the role it binds.
	role, binding := find(objects, "ClusterRole", ""), find(objects, "ClusterRoleBinding", "")
	if role == nil || binding == nil || role.GetName() != "plumb-system:plumb" || binding.Object["roleRef"].(map[string]any)["name"] != role.GetName() {
		t.Errorf("ClusterRole %v and ClusterRoleBinding %v: want both named plumb-system:plumb, the binding naming the role", role, binding)
	}
	if sa := find(objects, "ServiceAccount", "plumb"); sa == nil || sa.Object["automountServiceAccountToken"] != false {
		t.Errorf("ServiceAccount: %v, want one that mounts no token itself", sa)
	}
	for _, kind := range []string{"PodDisruptionBudget", "Service", "Secret", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if find(objects, kind, "") == nil {
			t.Errorf("no %s rendered by default: %v", kind, kinds(objects))
		}
	}
	for _, kind := range []string{"Ingress", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"} {
		if find(objects, kind, "") != nil {
			t.Errorf("%s rendered though it is off by default", kind)
		}
	}
}

func TestEachRBACModeGrantsWhatItSays(t *testing.T) {
	writes := []string{"create", "patch", "delete", "update"}
	managed := func(r rule) bool {
		return slices.Contains(r.Resources, "deployments") || slices.Contains(r.Resources, "configmaps") || slices.Contains(r.Resources, "namespaces")
	}

	t.Run("cluster", func(t *testing.T) {
		objects, _, err := render(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		var granted bool
		for _, r := range rulesOf(objects) {
			if managed(r) && strings.HasPrefix(r.Role, "ClusterRole/") && slices.Contains(r.Verbs, "patch") {
				granted = true
			}
		}
		if !granted {
			t.Errorf("mode cluster grants no write on Deployments in a ClusterRole: %v", rulesOf(objects))
		}
	})
	t.Run("namespaces", func(t *testing.T) {
		objects, _, err := render(t, values(t, valueSets["namespaces"]))
		if err != nil {
			t.Fatal(err)
		}
		if o := find(objects, "ClusterRole", ""); o != nil {
			t.Errorf("mode namespaces rendered a ClusterRole %s", o.GetName())
		}
		if o := find(objects, "ClusterRoleBinding", ""); o != nil {
			t.Errorf("mode namespaces rendered a ClusterRoleBinding %s", o.GetName())
		}
		roles := map[string]bool{}
		for _, o := range objects {
			if o.GetKind() == "Role" {
				roles[o.GetNamespace()] = true
			}
		}
		if want := map[string]bool{"team-a": true, "team-b": true, releaseNamespace: true}; fmt.Sprint(roles) != fmt.Sprint(want) {
			t.Errorf("Roles in %v, want in %v (the listed namespaces, and the Lease's)", roles, want)
		}
		if a := args(t, objects); !slices.Contains(a, "--watch-namespaces=team-a,team-b") || !slices.Contains(a, "--no-cross-namespace") {
			t.Errorf("args %v lack --watch-namespaces=team-a,team-b and the default --no-cross-namespace", a)
		}
		objects, _, err = render(t, values(t, valueSets["namespaces"]+"\ncontroller: {noCrossNamespace: false}"))
		if err != nil {
			t.Fatal(err)
		}
		if a := args(t, objects); slices.Contains(a, "--no-cross-namespace") {
			t.Errorf("args %v: noCrossNamespace false still gave --no-cross-namespace", a)
		}
	})
	t.Run("none", func(t *testing.T) {
		objects, _, err := render(t, values(t, valueSets["none"]))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rulesOf(objects) {
			if managed(r) && slices.ContainsFunc(r.Verbs, func(v string) bool { return slices.Contains(writes, v) }) {
				t.Errorf("mode none grants %v on %v in %s: plumb must write only as the Apps' ServiceAccounts", r.Verbs, r.Resources, r.Role)
			}
		}
		var impersonates bool
		for _, r := range rulesOf(objects) {
			impersonates = impersonates || slices.Contains(r.Resources, "serviceaccounts") && slices.Contains(r.Verbs, "impersonate")
		}
		if !impersonates {
			t.Error("mode none does not let plumb impersonate ServiceAccounts")
		}
		if a := args(t, objects); !slices.Contains(a, "--default-service-account=plumb-app") {
			t.Errorf("args %v lack --default-service-account=plumb-app", a)
		}
		var readsNamespaces bool
		for _, r := range rulesOf(objects) {
			readsNamespaces = readsNamespaces || slices.Contains(r.Resources, "namespaces") && slices.Contains(r.Verbs, "watch")
		}
		if !readsNamespaces {
			t.Error("mode none does not let plumb watch the cluster-scoped kinds of rbac.clusterRules")
		}
	})
}

// Each value set's values reach what it renders.
func TestEveryValueReachesTheRenderedObjects(t *testing.T) {
	objects, _, err := render(t, values(t, valueSets["everything"]))
	if err != nil {
		t.Fatal(err)
	}
	a := args(t, objects)
	for _, flag := range []string{"--workers=8", "--log-level=debug", "--log-encoding=console", "--app-label-selector=shard=a",
		"--default-service-account=deployer", "--no-cross-namespace", "--notification-blocked-cidrs=10.0.0.0/8", "--notification-block-default-cidrs=false",
		"--allow-insecure-registries", "--pprof-addr=127.0.0.1:6060", "--max-repository-files=11", "--max-repository-bytes=12", "--max-file-bytes=13", "--max-objects=14", "--max-fetch-bytes=15",
		"--render-timeout=3m", "--render-memory-bytes=536870912", "--render-cache-bytes=1048576", "--shutdown-timeout=50s",
		"--kube-api-qps=20", "--kube-api-burst=40", "--webhook-max-body-bytes=2048",
		"--no-remote-clusters", "--max-destinations=5", "--max-destination-kinds=6", "--max-destinations-per-namespace=3",
		"--destination-blocked-cidrs=10.9.0.0/16,10.8.0.0/16", "--destination-block-default-cidrs=false"} {
		if !slices.Contains(a, flag) {
			t.Errorf("args %v lack %s", a, flag)
		}
	}
	if grace, _, _ := unstructured.NestedFieldNoCopy(find(objects, "Deployment", "").Object, "spec", "template", "spec", "terminationGracePeriodSeconds"); fmt.Sprint(grace) != "65" {
		t.Errorf("terminationGracePeriodSeconds = %d, want the shutdown timeout (50s) and 15s more", grace)
	}
	var widgets bool
	for _, r := range rulesOf(objects) {
		widgets = widgets || slices.Contains(r.Resources, "widgets")
	}
	if !widgets {
		t.Error("rbac.extraRules did not reach the ClusterRole")
	}

	objects, _, err = render(t, values(t, valueSets["ingress"]))
	if err != nil {
		t.Fatal(err)
	}
	ingress := find(objects, "Ingress", "")
	if ingress == nil {
		t.Fatalf("no Ingress in %v", kinds(objects))
	}
	rules, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "rules")
	paths, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "http", "paths")
	tls, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "tls")
	if len(paths) != 1 || paths[0].(map[string]any)["path"] != "/hooks/" || len(tls) != 1 || tls[0].(map[string]any)["secretName"] != "plumb-tls" ||
		ingress.Object["spec"].(map[string]any)["ingressClassName"] != "nginx" || ingress.GetAnnotations()["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("Ingress %v: want only /hooks/, TLS from plumb-tls, class nginx and the annotation", ingress.Object["spec"])
	}
	if a := args(t, objects); !slices.Contains(a, "--webhook-secret-file=gitlab=/etc/plumb/webhook/gitlab") {
		t.Errorf("args %v lack the gitlab secret file", a)
	}

	objects, _, err = render(t, values(t, valueSets["existingSecret"]))
	if err != nil {
		t.Fatal(err)
	}
	if s := find(objects, "Secret", ""); s != nil {
		t.Errorf("the chart made Secret %s though an existing one is named", s.GetName())
	}
	if find(objects, "PodDisruptionBudget", "") != nil {
		t.Error("a PodDisruptionBudget for a single replica would block every drain")
	}
	d := find(objects, "Deployment", "")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if image := containers[0].(map[string]any)["image"]; image != "ghcr.io/plumb-dev/plumb@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %v, want the digest", image)
	}
	volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	var mounted bool
	for _, v := range volumes {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == "my-hooks" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("volumes %v do not mount the existing Secret my-hooks", volumes)
	}
	// The pods roll when the providers or the Secret's name change.
	checksum := func(set string) string {
		t.Helper()
		objects, _, err := render(t, values(t, set))
		if err != nil {
			t.Fatal(err)
		}
		v, found, _ := unstructured.NestedString(find(objects, "Deployment", "").Object, "spec", "template", "metadata", "annotations", "checksum/webhook-providers")
		if !found || v == "" {
			t.Fatalf("no checksum/webhook-providers annotation with %q", set)
		}
		return v
	}
	base := checksum("")
	for _, set := range []string{"webhook: {providers: [github, gitlab]}", "webhook: {secret: {existingSecret: other}}"} {
		if checksum(set) == base {
			t.Errorf("the pod template does not change with %q: the pods would keep the old secrets", set)
		}
	}

	objects, _, err = render(t, values(t, valueSets["networkPolicy"]))
	if err != nil {
		t.Fatal(err)
	}
	policy := find(objects, "NetworkPolicy", "")
	if policy == nil || !strings.Contains(fmt.Sprint(policy.Object["spec"]), "ingress-nginx") {
		t.Errorf("NetworkPolicy %v: want the webhook port open only to webhookFrom", policy)
	}
}

// The dashboard is off by default; on, it runs plumb ui --proxy trusting
// only its proxy, with a ServiceAccount that may impersonate, review
// access and watch Apps and nothing else, in pods no controller selector
// takes; without a way to trust its proxy it does not render.
func TestTheDashboardIsOffByDefaultAndTrustsOnlyItsProxy(t *testing.T) {
	objects, _, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if strings.Contains(o.GetName(), "dashboard") {
			t.Errorf("the defaults render %s %s", o.GetKind(), o.GetName())
		}
	}
	objects, _, err = render(t, values(t, valueSets["dashboard"]))
	if err != nil {
		t.Fatal(err)
	}
	d := find(objects, "Deployment", "plumb-dashboard")
	if d == nil {
		t.Fatalf("no dashboard Deployment in %v", kinds(objects))
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	dashArgs, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"ui", "--proxy", "--addr=unix:///run/plumb-dashboard/ui.sock", "--user-header=X-Forwarded-User", "--groups-header=X-Forwarded-Groups",
		"--user-prefix=dashboard:", "--groups-prefix=dashboard:",
		// previews read and render as the controller does
		"--max-repository-files=10000", "--max-repository-bytes=268435456", "--max-file-bytes=16777216", "--max-objects=5000",
		"--max-fetch-bytes=1073741824", "--render-timeout=2m", "--render-memory-bytes=2147483648", "--max-previews=1"} {
		if !slices.Contains(dashArgs, want) {
			t.Errorf("the dashboard's args %v lack %s", dashArgs, want)
		}
	}
	for _, a := range dashArgs {
		if strings.HasPrefix(a, "--trusted-proxy") {
			t.Errorf("the dashboard with its proxy in the pod trusts an address (%s): a port-forward into the pod arrives from loopback", a)
		}
	}
	if len(containers) != 2 || containers[1].(map[string]any)["name"] != "oauth2-proxy" {
		t.Fatalf("the proxy container is not in the dashboard's pod: %v", containers)
	}
	// Both containers mount the socket's folder, an emptyDir of the pod.
	for _, c := range containers {
		mounts, _, _ := unstructured.NestedSlice(c.(map[string]any), "volumeMounts")
		if !slices.ContainsFunc(mounts, func(m any) bool {
			return m.(map[string]any)["name"] == "socket" && m.(map[string]any)["mountPath"] == "/run/plumb-dashboard"
		}) {
			t.Errorf("container %v does not mount the socket's folder: %v", c.(map[string]any)["name"], mounts)
		}
	}
	selector, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
	controllerSelector, _, _ := unstructured.NestedStringMap(find(objects, "Deployment", "plumb").Object, "spec", "selector", "matchLabels")
	if selector["app.kubernetes.io/name"] == controllerSelector["app.kubernetes.io/name"] {
		t.Errorf("the dashboard's pods %v would be selected by the controller's Services and budget (%v)", selector, controllerSelector)
	}
	// Namespace-qualified, as the controller's: two installs do not collide.
	role, binding := find(objects, "ClusterRole", "plumb-system:plumb-dashboard"), find(objects, "ClusterRoleBinding", "plumb-system:plumb-dashboard")
	if role == nil || binding == nil || binding.Object["roleRef"].(map[string]any)["name"] != role.GetName() {
		t.Fatalf("dashboard ClusterRole %v and binding %v: want both named plumb-system:plumb-dashboard, the binding naming the role", role, binding)
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var got []string
	for _, r := range rules {
		rule := r.(map[string]any)
		for _, res := range rule["resources"].([]any) {
			for _, verb := range rule["verbs"].([]any) {
				got = append(got, fmt.Sprint(verb, " ", res))
			}
		}
	}
	slices.Sort(got)
	want := []string{"create selfsubjectaccessreviews", "create subjectaccessreviews", "get apps", "impersonate groups", "impersonate users", "list apps", "watch apps"}
	if !slices.Equal(got, want) {
		t.Errorf("the dashboard may %v, want exactly %v", got, want)
	}
	service := find(objects, "Service", "plumb-dashboard")
	if ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports"); fmt.Sprint(ports[0].(map[string]any)["targetPort"]) != "4180" {
		t.Errorf("the dashboard's Service targets %v, want the proxy's port 4180", ports)
	}

	objects, _, err = render(t, values(t, valueSets["dashboardTLS"]))
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ = unstructured.NestedSlice(find(objects, "Deployment", "plumb-dashboard").Object, "spec", "template", "spec", "containers")
	dashArgs, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"--tls-cert-file=/etc/plumb/dashboard-tls/tls.crt", "--client-ca-file=/etc/plumb/dashboard-client-ca/ca.crt", "--client-cert-name=oauth2-proxy.auth.svc"} {
		if !slices.Contains(dashArgs, want) {
			t.Errorf("the mutual-TLS dashboard's args %v lack %s", dashArgs, want)
		}
	}
	for _, a := range dashArgs {
		if strings.HasPrefix(a, "--trusted-proxy") {
			t.Errorf("the mutual-TLS dashboard trusts an address: %s", a)
		}
	}

	if _, _, err := render(t, values(t, "dashboard: {enabled: true, addr: ':9400', trustedProxies: []}")); err == nil || !strings.Contains(err.Error(), "believes user headers only from its proxy") {
		t.Errorf("a dashboard trusting no proxy: %v, want the chart's refusal", err)
	}
	for _, loopback := range []string{"127.0.0.1/32", "::1", "0.0.0.0/0", "0.0.0.0/1", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1", "::/0"} {
		if _, _, err := render(t, values(t, "dashboard: {enabled: true, addr: ':9400', trustedProxies: ['"+loopback+"']}")); err == nil || !strings.Contains(err.Error(), "port-forward") {
			t.Errorf("a dashboard trusting %s: %v, want the chart's refusal naming port-forward", loopback, err)
		}
	}
	if _, _, err := render(t, values(t, "dashboard: {enabled: true}")); err == nil || !strings.Contains(err.Error(), "only proxyContainers in its pod can reach") {
		t.Errorf("a dashboard on its socket with no proxy container: %v, want the chart's refusal", err)
	}
	if _, _, err := render(t, values(t, "dashboard: {enabled: true, addr: 'unix:///tmp/ui.sock', proxyContainers: [{name: p, image: p}]}")); err == nil || !strings.Contains(err.Error(), "/run/plumb-dashboard/") {
		t.Errorf("a dashboard socket outside the shared folder: %v, want the chart's refusal", err)
	}
	if _, _, err := render(t, values(t, "dashboard: {enabled: true}\nrbac: {mode: namespaces, namespaces: [team-a]}")); err == nil || !strings.Contains(err.Error(), "cluster-wide RBAC") {
		t.Errorf("a dashboard in rbac.mode namespaces: %v, want the chart's refusal (it needs cluster-wide RBAC)", err)
	}
	objects, _, err = render(t, values(t, "dashboard: {enabled: true, addr: ':9400', proxySecretName: proxy-secret}"))
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ = unstructured.NestedSlice(find(objects, "Deployment", "plumb-dashboard").Object, "spec", "template", "spec", "containers")
	if dashArgs, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args"); !slices.Contains(dashArgs, "--proxy-secret-file=/etc/plumb/dashboard-proxy-secret/secret") {
		t.Errorf("the dashboard with proxySecretName: args %v lack --proxy-secret-file", dashArgs)
	}
	if _, _, err := render(t, values(t, "dashboard: {enabled: true, addr: ':9443', tls: {secretName: a, clientCASecretName: b}}")); err == nil || !strings.Contains(err.Error(), "clientCertNames") {
		t.Errorf("a dashboard trusting a whole CA: %v, want the chart's refusal", err)
	}
	// It previews as the controller ticks: with its lockdown.
	objects, _, err = render(t, values(t, valueSets["dashboard"]+"\ncontroller: {defaultServiceAccount: deployer, noCrossNamespace: true, allowInsecureRegistries: true, destinationBlockedCIDRs: [10.9.0.0/16]}"))
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ = unstructured.NestedSlice(find(objects, "Deployment", "plumb-dashboard").Object, "spec", "template", "spec", "containers")
	dashArgs, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	// --default-service-account too, so that the App page says it cannot
	// preview Apps that act as it (Kubernetes impersonates once).
	if !slices.Contains(dashArgs, "--default-service-account=deployer") || !slices.Contains(dashArgs, "--no-cross-namespace") ||
		!slices.Contains(dashArgs, "--allow-insecure-registries") || !slices.Contains(dashArgs, "--destination-blocked-cidrs=10.9.0.0/16") {
		t.Errorf("the dashboard's args %v: want --no-cross-namespace, --allow-insecure-registries, --destination-blocked-cidrs=10.9.0.0/16 and --default-service-account=deployer", dashArgs)
	}
}

// The pod's annotations never carry a hash of secrets that values give.
func TestGivenWebhookSecretsStayOutOfThePodTemplate(t *testing.T) {
	first, _, err := render(t, values(t, "webhook: {secret: {values: {github: first-secret}}}"))
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := render(t, values(t, "webhook: {secret: {values: {github: second-secret}}}"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(find(first, "Deployment", "").Object)
	b, _ := json.Marshal(find(second, "Deployment", "").Object)
	if string(a) != string(b) {
		t.Error("the Deployment depends on the webhook secret's value: a hash of it is readable by whoever reads pods")
	}
	if s := find(first, "Secret", ""); s == nil || fmt.Sprint(s.Object["data"]) != fmt.Sprint(map[string]any{"github": "Zmlyc3Qtc2VjcmV0"}) {
		t.Errorf("Secret %v, want the given value", s)
	}
}

func TestThePrometheusRuleCarriesTheProjectsAlerts(t *testing.T) {
	objects, _, err := render(t, values(t, valueSets["monitoring"]))
	if err != nil {
		t.Fatal(err)
	}
	rule := find(objects, "PrometheusRule", "")
	if rule == nil {
		t.Fatalf("no PrometheusRule in %v", kinds(objects))
	}
	rendered, _ := json.Marshal(rule.Object["spec"])
	source, err := os.ReadFile("alerts/plumb.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(source, &want); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	if string(rendered) != string(wantJSON) {
		t.Errorf("the PrometheusRule's spec differs from alerts/plumb.rules.yaml:\n%s\nwant\n%s", rendered, wantJSON)
	}
	if sm := find(objects, "ServiceMonitor", ""); sm == nil || sm.Object["spec"].(map[string]any)["jobLabel"] != "plumb.dev/scrape-job" {
		t.Errorf("ServiceMonitor %v: want one naming the job after plumb.dev/scrape-job (the rules expect job=\"plumb\")", sm)
	}
}

func TestTheSchemaNamesEveryWebhookProvider(t *testing.T) {
	data, err := os.ReadFile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Webhook struct {
				Properties struct {
					Providers struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"providers"`
					Secret struct {
						Properties struct {
							Values struct {
								Properties map[string]any `json:"properties"`
							} `json:"values"`
						} `json:"properties"`
					} `json:"secret"`
				} `json:"properties"`
			} `json:"webhook"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range webhook.Providers {
		want = append(want, string(p))
	}
	sort.Strings(want)
	enum := slices.Sorted(slices.Values(schema.Properties.Webhook.Properties.Providers.Items.Enum))
	if !slices.Equal(enum, want) {
		t.Errorf("webhook.providers allows %v, the receiver serves %v", enum, want)
	}
	var keys []string
	for k := range schema.Properties.Webhook.Properties.Secret.Properties.Values.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !slices.Equal(keys, want) {
		t.Errorf("webhook.secret.values takes %v, the receiver serves %v", keys, want)
	}
}

func TestTheSchemaRejectsWrongValuesWithAClearMessage(t *testing.T) {
	for name, c := range map[string]struct{ set, want string }{
		"unknown mode":               {"rbac: {mode: all}", "/rbac/mode"},
		"namespaces without any":     {"rbac: {mode: namespaces}", "/rbac/namespaces"},
		"none without a SA":          {"rbac: {mode: none}", "/controller/defaultServiceAccount"},
		"no replicas":                {"replicas: 0", "/replicas"},
		"an unknown key":             {"controler: {workers: 2}", "controler"},
		"a log level":                {"controller: {logLevel: loud}", "/controller/logLevel"},
		"ingress without a host":     {"webhook: {ingress: {enabled: true, tlsSecretName: x}}", "/webhook/ingress/host"},
		"an unknown provider":        {"webhook: {providers: [svn]}", "/webhook/providers/0"},
		"a bad digest":               {"image: {digest: latest}", "/image/digest"},
		"a bad namespace":            {"rbac: {mode: namespaces, namespaces: [Team_A]}", "/rbac/namespaces/0"},
		"a rule with a misspelt key": {"rbac: {extraRules: [{apiGroups: [''], resources: [pods], verb: [get]}]}", "/rbac/extraRules/0"},
		"two webhook secrets":        {"webhook: {secret: {existingSecret: mine, values: {github: s3cret}}}", "/webhook/secret/values"},
		"an unknown verb":            {"rbac: {extraRules: [{apiGroups: [''], resources: [pods], verbs: [escalate]}]}", "/rbac/extraRules/0/verbs/0"},
		"a short URL secret":         {"webhook: {providers: [dockerhub], secret: {values: {dockerhub: short}}}", "/webhook/secret/values/dockerhub"},
		"a URL secret with a slash":  {"webhook: {providers: [quay], secret: {values: {quay: 0123456789abcdef/x}}}", "/webhook/secret/values/quay"},
		"a URL secret of dots":       {"webhook: {providers: [quay], secret: {values: {quay: '................'}}}", "/webhook/secret/values/quay"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := render(t, values(t, c.set))
			if err == nil {
				t.Fatalf("%s was accepted", c.set)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want a schema error naming %s", err, c.want)
			}
		})
	}
}

// The server-side dry-run: every object of every value set, as the API
// server would take it on install, with unknown fields refused.
func TestEveryRenderedObjectPassesAServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	clients := newClients(t)
	for _, ns := range []string{releaseNamespace, "team-a", "team-b"} {
		clients.ensureNamespace(t, ns)
	}
	for name, set := range valueSets {
		t.Run(name, func(t *testing.T) {
			objects, _, err := render(t, values(t, set))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objects {
				if err := clients.dryRun(ctx, o); err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

// The pod the Deployment makes passes Pod Security admission's restricted
// level, enforced by the API server on a namespace labelled for it.
func TestThePodPassesTheRestrictedPodSecurityLevel(t *testing.T) {
	ctx := context.Background()
	clients := newClients(t)
	const ns = "restricted"
	clients.ensureNamespace(t, ns)
	if _, err := clients.kube.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(ns).WithLabels(map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	}), metav1.ApplyOptions{FieldManager: "chart-test", Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plumb"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := clients.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plumb-dashboard"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objects, _, err := render(t, values(t, valueSets["dashboard"])) // with the proxy's container
	if err != nil {
		t.Fatal(err)
	}
	dashboard, _, _ := unstructured.NestedMap(find(objects, "Deployment", "plumb-dashboard").Object, "spec", "template")
	dashboardPod := &unstructured.Unstructured{Object: dashboard}
	dashboardPod.SetAPIVersion("v1")
	dashboardPod.SetKind("Pod")
	dashboardPod.SetNamespace(ns)
	dashboardPod.SetName("plumb-dashboard-restricted-check")
	if err := clients.dryRun(ctx, dashboardPod); err != nil {
		t.Errorf("the dashboard's pod under Pod Security level restricted: %v", err)
	}
	template, _, _ := unstructured.NestedMap(find(objects, "Deployment", "plumb").Object, "spec", "template")
	pod := &unstructured.Unstructured{Object: template}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetNamespace(ns)
	pod.SetName("plumb-restricted-check")
	if err := clients.dryRun(ctx, pod); err != nil {
		t.Errorf("the chart's pod under Pod Security level restricted: %v", err)
	}
	// The check can fail: the same pod with a capability added is refused.
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	_ = unstructured.SetNestedStringSlice(containers[0].(map[string]any), []string{"NET_ADMIN"}, "securityContext", "capabilities", "add")
	_ = unstructured.SetNestedSlice(pod.Object, containers, "spec", "containers")
	if err := clients.dryRun(ctx, pod); err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("a pod adding NET_ADMIN: %v, want Pod Security's refusal", err)
	}
}

var monitoringCRDs sync.Once

func newClients(t *testing.T) *testClients {
	t.Helper()
	ctx := context.Background()
	if err := crd.Install(ctx, cluster.Config); err != nil {
		t.Fatalf("installing plumb's CRDs: %v", err)
	}
	var installErr error
	monitoringCRDs.Do(func() { installErr = installMonitoringCRDs(ctx, cluster.Config) })
	if installErr != nil {
		t.Fatal(installErr)
	}
	c, err := newTestClientsFor(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installMonitoringCRDs generates the Prometheus Operator's ServiceMonitor
// and PrometheusRule CRDs from its own API types (the tool module
// hack/tools/monitoringcrds) and installs them.
func installMonitoringCRDs(ctx context.Context, cfg *rest.Config) error {
	dir, err := os.MkdirTemp("", "monitoring-crds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command("go", "run", "sigs.k8s.io/controller-tools/cmd/controller-gen", "crd",
		"paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1", "output:crd:dir="+dir)
	cmd.Dir = filepath.Join("..", "..", "hack", "tools", "monitoringcrds")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("generating the Prometheus Operator's CRDs (cd hack/tools/monitoringcrds && go run sigs.k8s.io/controller-tools/cmd/controller-gen crd ...): %v\n%s", err, out)
	}
	tc, err := newTestClientsFor(cfg)
	if err != nil {
		return err
	}
	for _, file := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			return err
		}
		if err := tc.apply(ctx, u, false); err != nil {
			return fmt.Errorf("installing %s: %w", file, err)
		}
	}
	return tc.waitForKinds(ctx, "monitoring.coreos.com", "ServiceMonitor", "PrometheusRule")
}

// shards: N runs N replicas, each told to spread the Apps, named after its
// pod, with the rights over the members' Leases and a disruption budget.
func TestShardsRunThatManyReplicasWithTheirLeases(t *testing.T) {
	objects, _, err := render(t, values(t, valueSets["shards"]))
	if err != nil {
		t.Fatal(err)
	}
	d := find(objects, "Deployment", "")
	if replicas, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(replicas) != "3" {
		t.Errorf("replicas = %v, want shards (3) over replicas (1)", replicas)
	}
	if a := args(t, objects); !slices.Contains(a, "--shards=auto") || slices.Contains(a, "--leader-elect=true") {
		t.Errorf("args %v: want --shards=auto, and no leader election", a)
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	if len(env) != 1 || fmt.Sprint(env[0]) != "map[name:POD_NAME valueFrom:map[fieldRef:map[fieldPath:metadata.name]]]" {
		t.Errorf("env %v, want POD_NAME from the pod's name", env)
	}
	var leases []string
	for _, r := range rulesOf(objects) {
		if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) == 0 {
			leases = append(leases, r.Verbs...)
		}
	}
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		if !slices.Contains(leases, verb) {
			t.Errorf("the Role's rules over any Lease (%v) lack %s", leases, verb)
		}
	}
	if find(objects, "PodDisruptionBudget", "") == nil {
		t.Error("no PodDisruptionBudget for three shards")
	}

	objects, _, err = render(t, values(t, valueSets["defaults"]))
	if err != nil {
		t.Fatal(err)
	}
	if a := args(t, objects); slices.Contains(a, "--shards=auto") {
		t.Error("the defaults spread the Apps over replicas")
	}
	var anyLease []string
	for _, r := range rulesOf(objects) {
		if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) == 0 {
			anyLease = append(anyLease, r.Verbs...)
		}
	}
	slices.Sort(anyLease)
	if !slices.Equal(anyLease, []string{"create", "list"}) {
		// list: a leader waits for shard members still running during a
		// change of mode; nothing may write another's Lease.
		t.Errorf("the defaults' rules over any Lease: %v, want only create and list", anyLease)
	}
}
