package source_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// webChart is a chart whose ConfigMap carries the release's name and a
// value, with a values file of its own.
func webChart(color string) map[string]string {
	return map[string]string{
		"values.yaml":      fmt.Sprintf("color: %s\n", color),
		"values-prod.yaml": "replicas: 3\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n" +
			"data:\n  color: {{ .Values.color | quote }}\n  replicas: {{ .Values.replicas | default 1 | quote }}\n",
	}
}

// helmReader reads Helm repositories through repo's transport, checking an
// index on every read (no max age) so that the test sees each request.
func helmReader(t *testing.T, repo *testenv.HelmRepository, allowInsecure bool) *source.Reader {
	t.Helper()
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: repo.Transport(), AllowInsecureRegistries: allowInsecure, HelmIndexMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func helmRequest(repo *testenv.HelmRepository, versions string) source.Request {
	return source.Request{
		Render: render.Options{Helm: render.HelmOptions{ReleaseName: "shop", Namespace: "default", ValuesFiles: []string{"web/values-prod.yaml"}}},
		Helm: &source.HelmRequest{Repository: repo.URL, Chart: "web", Version: versions,
			Auth: helmrepo.Auth{Username: repo.Username, Password: repo.Password}},
	}
}

// A chart of a real HTTPS repository behind basic auth is read at the
// highest version in the range, recorded as <version>@sha256:<archive>,
// rendered with the chart's own values file; an unchanged read costs one
// conditional GET of the index and no download; a version published in
// the range is taken on the next read; another account is not served the
// cached render.
func TestAHelmChartIsReadFromARepositoryAndRendered(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true, Username: "ci", Password: "s3cret"})
	first := repo.Publish(t, "web", "1.0.0", webChart("blue"))
	repo.Publish(t, "web", "2.0.0", webChart("red")) // outside the range
	r := helmReader(t, repo, false)
	req := helmRequest(repo, ">=1.0.0 <2")
	ctx := context.Background()

	read, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := read.Revision.String(), "1.0.0@sha256:"+first; got != want || read.Engine != render.Helm || read.Cached {
		t.Fatalf("read %s by %s (cached=%v), want %s by helm", got, read.Engine, read.Cached, want)
	}
	if !cmp.Equal(names(read), []string{"ConfigMap/shop-settings"}) {
		t.Fatalf("rendered %v", names(read))
	}
	cm, err := read.Objects[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if data := cm.Object["data"]; !cmp.Equal(data, map[string]any{"color": "blue", "replicas": "3"}) {
		t.Errorf("data %v, want the chart's values with its values-prod.yaml", data)
	}
	repo.Answered()

	again, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := repo.Answered(); !again.Cached || !cmp.Equal(got, map[string]int{"GET /charts/index.yaml 304": 1}) || r.Renders() != 1 {
		t.Errorf("an unchanged read: cached=%v, %d renders, requests %v; want one 304 of the index, no download, one render", again.Cached, r.Renders(), got)
	}

	moved := repo.Publish(t, "web", "1.1.0", webChart("green"))
	third, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := third.Revision.String(), "1.1.0@sha256:"+moved; got != want || third.Cached {
		t.Errorf("after 1.1.0 was published: %s (cached=%v), want %s", got, third.Cached, want)
	}
	if got := repo.Answered(); !cmp.Equal(got, map[string]int{"GET /charts/index.yaml 200": 1, "GET /charts/web-1.1.0.tgz 200": 1}) {
		t.Errorf("reading a new version made %v, want the index and the new archive once each", got)
	}

	stranger := helmRequest(repo, ">=1.0.0 <2")
	stranger.Helm.Auth.Password = "guess"
	if got, err := r.Read(ctx, stranger); !errors.Is(err, helmrepo.ErrUnauthorized) || source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("another account's read of a cached render: %v, %v; want ErrUnauthorized (SourceUnavailable)", got, err)
	}
}

// A render is cached per account: on a repository that lets anyone read
// (so every account passes the index), a read with other credentials is
// rendered for them, not served the render another account's read made,
// and each account's next read is served its own.
func TestAHelmRenderIsCachedPerAccount(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true}) // no auth
	repo.Publish(t, "web", "1.0.0", webChart("blue"))
	r := helmReader(t, repo, false)
	ctx := context.Background()
	for i, account := range []helmrepo.Auth{{}, {Username: "ci", Password: "s3cret"}, {Username: "ci", Password: "other"}} {
		req := helmRequest(repo, "1.0.0")
		req.Helm.Auth = account
		for _, wantCached := range []bool{false, true} {
			got, err := r.Read(ctx, req)
			if err != nil {
				t.Fatalf("account %d: %v", i, err)
			}
			if got.Cached != wantCached {
				t.Errorf("account %d's read: cached=%v, want %v", i, got.Cached, wantCached)
			}
		}
	}
	if got := r.Renders(); got != 3 {
		t.Errorf("%d renders, want one per account", got)
	}
}

// What a Helm read refuses, and with which reason: a tampered archive
// (the index's digest), a missing chart or version, a range that does
// not parse, plain HTTP unless allowed, an outage.
func TestAHelmReadFailsClearly(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true})
	repo.Publish(t, "web", "1.0.0", webChart("blue"))
	r := helmReader(t, repo, false)
	ctx := context.Background()
	if _, err := r.Read(ctx, helmRequest(repo, "")); err != nil {
		t.Fatal(err)
	}

	repo.Replace(t, "web-1.0.0.tgz", testenv.Chart(t, "web", "1.0.0", webChart("hacked")))
	fresh := helmRequest(repo, "")
	fresh.Refresh = true
	_, err := r.Read(ctx, fresh)
	if !errors.Is(err, helmrepo.ErrDigestMismatch) || source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("a tampered archive: %v (%s), want ErrDigestMismatch (SourceUnavailable)", err, source.ReasonOf(err))
	}

	for _, tc := range []struct {
		chart, versions string
		want            source.Reason
	}{
		{"web", "~3", source.ReasonRevisionNotFound},
		{"api", "", source.ReasonRevisionNotFound},
		{"web", "not a range", source.ReasonInvalidSpec},
	} {
		req := helmRequest(repo, tc.versions)
		req.Helm.Chart = tc.chart
		if _, err := r.Read(ctx, req); source.ReasonOf(err) != tc.want {
			t.Errorf("chart %q version %q: %v (%s), want %s", tc.chart, tc.versions, err, source.ReasonOf(err), tc.want)
		}
	}

	plain := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{})
	plain.Publish(t, "web", "1.0.0", webChart("blue"))
	if _, err := helmReader(t, plain, false).Read(ctx, helmRequest(plain, "")); !errors.Is(err, source.ErrInsecureHelmRepository) || source.ReasonOf(err) != source.ReasonInvalidSpec {
		t.Errorf("an http:// repository without --allow-insecure-registries: %v, want ErrInsecureHelmRepository (InvalidSpec)", err)
	}
	if _, err := helmReader(t, plain, true).Read(ctx, helmRequest(plain, "")); err != nil {
		t.Errorf("an http:// repository with --allow-insecure-registries: %v", err)
	}

	repo.Stop()
	if _, err := r.Read(ctx, helmRequest(repo, "")); err == nil || source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("a repository that is down: %v (%s), want SourceUnavailable", err, source.ReasonOf(err))
	}
}

// An index that gives no digest (hand-written, or an old tool's): the
// revision carries the archive's own digest, and while the index stays
// the same an unchanged read downloads nothing.
func TestAHelmIndexWithoutDigestsIsReadOnce(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true})
	archive := testenv.Chart(t, "web", "1.0.0", webChart("blue"))
	digest := repo.PublishArchive(t, "web-1.0.0.tgz", archive)
	repo.WriteIndex(t, []byte("apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.0.0\n    urls:\n    - web-1.0.0.tgz\n"))
	r := helmReader(t, repo, false)
	ctx := context.Background()
	read, err := r.Read(ctx, helmRequest(repo, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := read.Revision.String(), "1.0.0@sha256:"+digest; got != want {
		t.Errorf("revision %s, want %s", got, want)
	}
	repo.Answered()
	again, err := r.Read(ctx, helmRequest(repo, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := repo.Answered(); !again.Cached || strings.Contains(fmt.Sprint(got), "tgz") {
		t.Errorf("an unchanged read: cached=%v, requests %v; want no download", again.Cached, got)
	}
}

// A verified chart's signature covers its archive only: a dependency it
// would fetch from a repository is refused with VerificationFailed rather
// than applied unverified under a verified revision (also when an
// unverified read of the chart rendered it with the dependency before),
// and nothing of it is asked for; the same chart with the dependency
// vendored is read.
func TestAVerifiedChartFetchesNoDependency(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true})
	key := testenv.GeneratePGPKey(t, "release")
	repo.Publish(t, "db", "1.0.0", map[string]string{"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db\n"})
	shop := map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: web\nversion: 1.0.0\ndependencies:\n- {name: db, version: ^1.0.0, repository: " + repo.URL + "}\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n",
	}
	repo.Publish(t, "web", "1.0.0", shop)
	repo.Sign(t, "web-1.0.0.tgz", key)
	r := helmReader(t, repo, false)
	req := helmRequest(repo, "1.0.0")
	req.Render.Helm.ValuesFiles = nil
	// Read unverified first: its render, with the dependency, is cached.
	if read, err := r.Read(context.Background(), req); err != nil || !cmp.Equal(names(read), []string{"ConfigMap/db", "ConfigMap/web"}) {
		t.Fatalf("the chart read without verify: %v, %v", read, err)
	}
	req.Helm.Verify = &source.HelmVerify{Keys: map[string][]byte{"release.asc": key.Public}}
	repo.Answered()
	_, err := r.Read(context.Background(), req)
	if source.ReasonOf(err) != source.ReasonVerificationFailed || !strings.Contains(err.Error(), `chart dependency "db"`) ||
		!strings.Contains(err.Error(), "vendor it under charts/") {
		t.Fatalf("a verified chart with a dependency to fetch: %v (%s), want VerificationFailed naming db", err, source.ReasonOf(err))
	}
	if n := repo.Answered()["GET /charts/db-1.0.0.tgz 200"]; n != 0 {
		t.Errorf("the dependency's archive was downloaded %d times", n)
	}

	shop["Chart.yaml"] = strings.Replace(shop["Chart.yaml"], "version: 1.0.0", "version: 1.1.0", 1)
	shop["charts/db/Chart.yaml"] = "apiVersion: v2\nname: db\nversion: 1.0.0\n"
	shop["charts/db/templates/cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db\n"
	repo.Publish(t, "web", "1.1.0", shop)
	repo.Sign(t, "web-1.1.0.tgz", key)
	read, err := r.Read(context.Background(), helmRequestWith(req, "1.1.0"))
	if err != nil {
		t.Fatalf("a verified chart with its dependency vendored: %v", err)
	}
	if !cmp.Equal(names(read), []string{"ConfigMap/db", "ConfigMap/web"}) {
		t.Errorf("rendered %v, want the chart and its vendored dependency", names(read))
	}
}

// helmRequestWith is req at another version.
func helmRequestWith(req source.Request, version string) source.Request {
	h := *req.Helm
	h.Version = version
	req.Helm = &h
	return req
}
