package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func ociApp(name, url string, ref plumbv1.OCIRef) *plumbv1.App {
	return &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{OCI: &plumbv1.OCISource{URL: url, Ref: ref}}}}
}

func helmApp(name, repository, chart, version string) *plumbv1.App {
	return &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: repository, Chart: chart, Version: version}}}}
}

// chartLayer makes an OCI App read a Helm chart's layer.
func chartLayer(a *plumbv1.App) *plumbv1.App {
	a.Spec.Source.OCI.LayerSelector = &plumbv1.OCILayerSelector{MediaType: helmChartLayer}
	return a
}

func TestARegistryPushMatchesTheAppsThatReadThePushedTag(t *testing.T) {
	ix := NewIndex()
	for _, a := range []*plumbv1.App{
		ociApp("tag", "oci://harbor.example.com/shop/web", plumbv1.OCIRef{Tag: "1.4.0"}),
		ociApp("range", "oci://Harbor.Example.com/shop/web/", plumbv1.OCIRef{SemVer: ">=1.0.0 <2.0.0"}),
		ociApp("other-range", "oci://harbor.example.com/shop/web", plumbv1.OCIRef{SemVer: "2.x"}),
		ociApp("pinned", "oci://harbor.example.com/shop/web", plumbv1.OCIRef{Digest: "sha256:" + strings.Repeat("a", 64)}),
		ociApp("latest", "oci://docker.io/team/app", plumbv1.OCIRef{}),
		helmApp("chart", "oci://ghcr.io/shop-org/charts", "podinfo", "6.5.1+build.7"),
		helmApp("chart-range", "oci://ghcr.io/shop-org/charts/", "podinfo", "^6.0.0"),
		helmApp("chart-any", "oci://ghcr.io/shop-org/charts", "podinfo", ""),
		helmApp("http-chart", "https://charts.example.com", "podinfo", "^6.0.0"),
		app("git-same-path", "https://harbor.example.com/shop/web", plumbv1.GitRef{Tag: "1.4.0"}, "", false),
		ociApp("artifact-range", "oci://quay.io/shop/api", plumbv1.OCIRef{SemVer: "^2.0.0"}),
		chartLayer(ociApp("chart-layer-range", "oci://quay.io/shop/api", plumbv1.OCIRef{SemVer: "^2.0.0"})),
	} {
		ix.Set(a)
	}
	for _, tt := range []struct {
		name string
		push []Artifact
		want []string
	}{
		{"a tag matches its tag and the ranges that contain it, in any spelling",
			[]Artifact{{"harbor.example.com/shop/web", "1.4.0"}}, []string{"range", "tag"}},
		{"a tag outside the ranges", []Artifact{{"harbor.example.com/shop/web", "3.0.0"}}, []string{}},
		{"Docker Hub's spellings", []Artifact{{"docker.io/team/app", "latest"}}, []string{"latest"}},
		{"another tag of a tag-tracking App", []Artifact{{"index.docker.io/team/app", "v2"}}, []string{}},
		{"a chart tag spells + as _", []Artifact{{"ghcr.io/shop-org/charts/podinfo", "6.5.1_build.7"}},
			[]string{"chart", "chart-any", "chart-range"}},
		{"a chart version in range", []Artifact{{"ghcr.io/shop-org/charts/podinfo", "6.6.0"}}, []string{"chart-any", "chart-range"}},
		{"_ is a chart's build metadata, not an artifact's", []Artifact{{"quay.io/shop/api", "2.1.0_build.1"}}, []string{"chart-layer-range"}},
		{"a push's tags past the first 100", append(slices.Repeat([]Artifact{{"harbor.example.com/shop/web", "9.9.9"}}, maxArtifacts),
			Artifact{"harbor.example.com/shop/web", "1.4.0"}), []string{}},
		{"another repository", []Artifact{{"harbor.example.com/shop/api", "1.4.0"}}, []string{}},
		{"several tags, each counted once", []Artifact{{"harbor.example.com/shop/web", "1.4.0"}, {"harbor.example.com/shop/web", "1.5.0"}},
			[]string{"range", "tag"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, k := range ix.Match(Push{Artifacts: tt.push}) {
				got = append(got, k.Name)
			}
			if diff := cmp.Diff(tt.want, append([]string{}, got...)); diff != "" {
				t.Errorf("matched (-want +got):\n%s", diff)
			}
		})
	}
	// A Git push naming the same host and path reaches the Git App only.
	keys := ix.Match(Push{URLs: []string{"https://harbor.example.com/shop/web"}, Ref: "refs/tags/1.4.0"})
	if len(keys) != 1 || keys[0].Name != "git-same-path" {
		t.Errorf("a Git tag push matched %v, want the Git App only", keys)
	}
}

// registryRequest builds a registry's request, carrying the secret the way
// the registry does: Harbor's Authorization header, a URL segment for
// Docker Hub and Quay, GitHub's signature.
func registryRequest(provider Provider, body []byte, token string) *http.Request {
	path := "/hooks/" + string(provider)
	if urlSecret(provider) {
		path += "/" + token
	}
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	switch provider {
	case Harbor:
		r.Header.Set("Authorization", token)
	case GitHub:
		r.Header.Set("X-GitHub-Event", "package")
		if token == secret {
			r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(body))
		}
	}
	return r
}

func localFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRegistryPushesTriggerTheirAppsOnlyWithTheSecret(t *testing.T) {
	rcv, tr := newTestReceiver(t,
		ociApp("harbor", "oci://harbor.example.com/shop/web", plumbv1.OCIRef{SemVer: "1.x"}),
		ociApp("dockerhub", "oci://docker.io/svendowideit/testhook", plumbv1.OCIRef{Tag: "latest"}),
		ociApp("quay", "oci://quay.io/shop/api", plumbv1.OCIRef{Tag: "stable"}),
		helmApp("ghcr", "oci://ghcr.io/shop-org/charts", "podinfo", "^6.5.0"),
		ociApp("bystander", "oci://quay.io/shop/other", plumbv1.OCIRef{Tag: "stable"}),
	)
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		rcv.Handler().ServeHTTP(w, r)
		return w
	}
	payloads := map[Provider][]byte{
		Harbor:    localFixture(t, "harbor/push-artifact.json"),
		DockerHub: fixture(t, "docker/docker_hub_build_notice.json"),
		Quay:      localFixture(t, "quay/push.json"),
		GitHub:    localFixture(t, "github/package-published.json"),
	}
	for provider, want := range map[Provider]string{Harbor: "harbor", DockerHub: "dockerhub", Quay: "quay", GitHub: "ghcr"} {
		t.Run(string(provider), func(t *testing.T) {
			for _, wrong := range []string{"guess", ""} {
				if w := serve(registryRequest(provider, payloads[provider], wrong)); w.Code != http.StatusUnauthorized {
					t.Errorf("secret %q: answer %d %q, want 401", wrong, w.Code, w.Body.String())
				}
			}
			before := len(tr.names())
			w := serve(registryRequest(provider, payloads[provider], secret))
			if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "matched 1 apps") {
				t.Fatalf("answer %d %q", w.Code, w.Body.String())
			}
			if got := tr.names()[before:]; len(got) != 1 || got[0] != want {
				t.Errorf("triggered %v, want [%s]", got, want)
			}
		})
	}
	t.Run("a secret in the URL of a provider that signs is no proof", func(t *testing.T) {
		for _, provider := range []Provider{Harbor, GitHub, GitLab, Gitea, Gogs, BitbucketServer} {
			r := registryRequest(provider, payloads[Harbor], "")
			r.URL.Path = "/hooks/" + string(provider) + "/" + secret
			r.Header.Del("Authorization")
			if verified(provider, secret, r, payloads[Harbor]) {
				t.Errorf("%s: the secret as the URL's last segment verified the request", provider)
			}
		}
		for _, provider := range []Provider{DockerHub, Quay} { // the check can tell
			r := registryRequest(provider, payloads[Harbor], secret)
			if !verified(provider, secret, r, payloads[Harbor]) {
				t.Errorf("%s: the secret in the URL did not verify the request", provider)
			}
		}
	})
	for _, tt := range []struct {
		name     string
		provider Provider
		body     string
	}{
		{"a Harbor pull", Harbor, `{"type":"PULL_ARTIFACT","event_data":{"resources":[{"tag":"1.4.0","resource_url":"harbor.example.com/shop/web:1.4.0"}]}}`},
		{"a Harbor push by digest", Harbor, `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"sha256:abc","resource_url":"harbor.example.com/shop/web@sha256:abc"}]}}`},
		{"an npm package", GitHub, `{"action":"published","package":{"name":"web","namespace":"shop-org","package_type":"npm","package_version":{"container_metadata":{"tag":{"name":"6.5.1"}}}}}`},
		{"an untagged container version", GitHub, `{"action":"published","package":{"name":"web","namespace":"shop-org","package_type":"CONTAINER","package_version":{}}}`},
		{"a package of another registry", GitHub, `{"action":"published","package":{"name":"web","namespace":"shop","package_type":"container",` +
			`"package_version":{"package_url":"harbor.example.com/shop/web:1.4.0","container_metadata":{"tag":{"name":"1.4.0"}}}}}`},
	} {
		t.Run(tt.name+" is ignored", func(t *testing.T) {
			before := len(tr.names())
			if w := serve(registryRequest(tt.provider, []byte(tt.body), secret)); w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "ignored") {
				t.Errorf("answer %d %q", w.Code, w.Body.String())
			}
			if len(tr.names()) != before {
				t.Errorf("triggered %v", tr.names()[before:])
			}
		})
	}
	t.Run("a Quay payload without tags is 400", func(t *testing.T) {
		if w := serve(registryRequest(Quay, []byte(`{"docker_url":"quay.io/shop/api"}`), secret)); w.Code != http.StatusBadRequest {
			t.Errorf("answer %d %q", w.Code, w.Body.String())
		}
	})
	t.Run("GitHub's package event without a package_url names ghcr.io/namespace/name", func(t *testing.T) {
		before := len(tr.names())
		body := `{"action":"updated","registry_package":{"name":"charts/podinfo","namespace":"Shop-Org","package_type":"container",` +
			`"package_version":{"container_metadata":{"tag":{"name":"6.6.0"}}},"registry":{"url":"https://ghcr.io/Shop-Org"}}}`
		if w := serve(registryRequest(GitHub, []byte(body), secret)); w.Code != http.StatusAccepted {
			t.Fatalf("answer %d %q", w.Code, w.Body.String())
		}
		if got := tr.names()[before:]; len(got) != 1 || got[0] != "ghcr" {
			t.Errorf("triggered %v, want [ghcr]", got)
		}
	})
}

func TestAURLSecretIsALongURLSegment(t *testing.T) {
	for _, tc := range []struct {
		provider Provider
		secret   string
		ok       bool
	}{
		{DockerHub, "0123456789abcdef", true},
		{Quay, "Abc-._~0123456789", true},
		{DockerHub, "0123456789abcde", false}, // 15
		{Quay, "0123456789abcdef/x", false},
		{Quay, "0123456789abcdef?x", false},
		{DockerHub, strings.Repeat(".", 16), false},
		{Harbor, "short", true}, // a header, not a URL
		{GitHub, "short", true},
	} {
		if err := CheckSecret(tc.provider, tc.secret); (err == nil) != tc.ok {
			t.Errorf("CheckSecret(%s, %q) = %v, want ok=%v", tc.provider, tc.secret, err, tc.ok)
		}
	}
}
