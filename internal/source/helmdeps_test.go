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
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// dependencyChart is a chart whose one ConfigMap is named after the chart
// and says which version rendered it.
func dependencyChart(name, version string) map[string]string {
	return map[string]string{
		"templates/cm.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-%s\n", name, strings.ReplaceAll(version, ".", "-")),
	}
}

// A chart in Git whose dependencies are not vendored gets them from a
// real HTTPS Helm repository behind basic auth (at Chart.lock's version,
// not the highest in the range), from a real OCI registry with htpasswd,
// and from a folder of the same repository; the accounts come with the
// request, and a read without them is not served the render made with
// them.
func TestAChartsDependenciesAreFetchedFromTheirRepositories(t *testing.T) {
	helmRepo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true, Username: "ci", Password: "s3cret"})
	helmRepo.Publish(t, "db", "1.0.0", dependencyChart("db", "1.0.0"))
	helmRepo.Publish(t, "db", "1.1.0", dependencyChart("db", "1.1.0"))
	registry := testenv.StartRegistry(t)
	registry.Push(t, "charts/cache", "2.0.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "cache", "2.0.0", dependencyChart("cache", "2.0.0"))))
	registry.Push(t, "charts/cache", "2.1.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "cache", "2.1.0", dependencyChart("cache", "2.1.0"))))
	ociRepo := registry.URL("charts")

	chartYAML := fmt.Sprintf("apiVersion: v2\nname: shop\nversion: 0.1.0\ndependencies:\n"+
		"- {name: db, version: '>=1.0.0', repository: %q}\n"+
		"- {name: cache, version: ^2.0.0, repository: %q}\n"+
		"- {name: lib, version: 0.1.0, repository: 'file://../lib'}\n", helmRepo.URL, ociRepo)
	lock := fmt.Sprintf("dependencies:\n- {name: db, version: 1.0.0, repository: %q}\ndigest: sha256:0\ngenerated: \"2026-01-01T00:00:00Z\"\n", helmRepo.URL)
	_, _, url := repo(t, map[string]string{
		"shop/Chart.yaml":          chartYAML,
		"shop/Chart.lock":          lock,
		"shop/templates/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop\n",
		"legacy/Chart.yaml":        "apiVersion: v1\nname: legacy\nversion: 0.1.0\n",
		"legacy/requirements.yaml": "dependencies:\n- {name: lib, version: 0.1.0, repository: 'file://../lib'}\n",
		"lib/Chart.yaml":           "apiVersion: v2\nname: lib\nversion: 0.1.0\n",
		"lib/templates/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lib\n",
	})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: helmRepo.Transport(), AllowInsecureRegistries: true})
	if err != nil {
		t.Fatal(err)
	}
	accounts := []source.ChartRepository{
		{URL: helmRepo.URL, Helm: helmrepo.Auth{Username: "ci", Password: "s3cret"}},
		{URL: ociRepo + "/", OCI: oci.Auth{Username: registry.Username, Password: registry.Password}, Insecure: true},
	}
	request := func(accounts []source.ChartRepository) source.Request {
		return source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "shop", Auth: auth,
			Render:            render.Options{Helm: render.HelmOptions{ReleaseName: "shop", Namespace: "default"}},
			ChartRepositories: accounts}
	}
	ctx := context.Background()
	res, err := r.Read(ctx, request(accounts))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ConfigMap/cache-2-1-0", "ConfigMap/db-1-0-0", "ConfigMap/lib", "ConfigMap/shop"}
	if got := names(res); !cmp.Equal(got, want) {
		t.Errorf("rendered %v, want %v (db at Chart.lock's 1.0.0, cache at the highest in ^2.0.0)", got, want)
	}

	// An apiVersion v1 chart names its dependencies in requirements.yaml.
	legacy := request(nil)
	legacy.Path = "legacy"
	if res, err := r.Read(ctx, legacy); err != nil || !cmp.Equal(names(res), []string{"ConfigMap/lib"}) {
		t.Errorf("an apiVersion v1 chart: %v, %v; want its file:// dependency's ConfigMap/lib", err, res)
	}

	// Without the accounts: the private repository refuses, and the
	// render made with them is not served.
	_, err = r.Read(ctx, request(nil))
	if !errors.Is(err, source.ErrDependency) || !strings.Contains(err.Error(), `"db"`) {
		t.Errorf("a read without the accounts: %v; want the dependency db refused", err)
	}
	if !errors.Is(err, helmrepo.ErrUnauthorized) {
		t.Errorf("a read without the accounts: %v; want ErrUnauthorized", err)
	}
	// A chart of the Helm repository itself whose dependency is in the
	// same repository: the source's own account fetches it; one vendored
	// as an archive under charts/ is not fetched.
	helmRepo.Publish(t, "app", "1.0.0", map[string]string{
		"Chart.yaml": fmt.Sprintf("apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- {name: db, version: ~1.1.0, repository: %q}\n"+
			"- {name: vendored, version: 3.0.0, repository: 'https://charts.invalid'}\n", helmRepo.URL+"/"),
		"charts/vendored-3.0.0.tgz": string(testenv.Chart(t, "vendored", "3.0.0", dependencyChart("vendored", "3.0.0"))),
		"charts/db-ha-1.0.0.tgz":    string(testenv.Chart(t, "db-ha", "1.0.0", dependencyChart("db-ha", "1.0.0"))), // not db
	})
	chartReq := source.Request{Render: render.Options{Helm: render.HelmOptions{ReleaseName: "app", Namespace: "default"}},
		Refresh: true, // the index changed since it was read
		Helm:    &source.HelmRequest{Repository: helmRepo.URL, Chart: "app", Auth: helmrepo.Auth{Username: "ci", Password: "s3cret"}}}
	res, err = r.Read(ctx, chartReq)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(res), []string{"ConfigMap/db-ha-1-0-0", "ConfigMap/db-1-1-0", "ConfigMap/vendored-3-0-0"}; !cmp.Equal(got, want) {
		t.Errorf("a Helm source's chart rendered %v, want %v", got, want)
	}

	// A registry over plain HTTP is refused when the controller does not
	// allow it, whatever the account says.
	strict, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: helmRepo.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Read(ctx, request(accounts)); !errors.Is(err, source.ErrInsecureRegistry) || source.ReasonOf(err) != source.ReasonInvalidSpec {
		t.Errorf("an insecure registry without --allow-insecure-registries: %v (%s); want ErrInsecureRegistry (InvalidSpec)", err, source.ReasonOf(err))
	}
}

// What a chart's dependencies may not do: name a repository by a `helm
// repo add` alias, carry credentials in the URL, leave the repository
// with file://, or ask for more dependencies than are fetched.
func TestAChartsDependenciesFailClearly(t *testing.T) {
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	many := "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n"
	for i := range 33 {
		many += fmt.Sprintf("- {name: d%d, version: 1.0.0, repository: 'https://charts.invalid'}\n", i)
	}
	for _, tc := range []struct {
		name, chart string
		want        source.Reason
		message     string
	}{
		{"an alias", "- {name: db, version: 1.0.0, repository: '@bitnami'}", source.ReasonInvalidManifest, "a name of `helm repo add`"},
		{"credentials in the URL", "- {name: db, version: 1.0.0, repository: 'https://u:hunter2@charts.invalid'}", source.ReasonInvalidManifest, "holds credentials"},
		{"credentials in an OCI URL that does not parse", "- {name: db, version: 1.0.0, repository: 'oci://robot:hunter2%t@ghcr.io/org/charts'}", source.ReasonInvalidManifest, "holds credentials"},
		{"credentials before a port that is none", "- {name: db, version: 1.0.0, repository: 'oci://u:ab/hunter2@host.io/charts'}", source.ReasonInvalidManifest, "holds credentials"},
		{"out of the repository", "- {name: db, version: 1.0.0, repository: 'file://../../../etc'}", source.ReasonInvalidManifest, "leaves the repository root"},
		{"a plain-HTTP repository the controller refuses", "- {name: db, version: 1.0.0, repository: 'http://charts.invalid'}", source.ReasonInvalidManifest, "plain HTTP"},
		{"an OCI repository that is no name", "- {name: db, version: 1.0.0, repository: 'oci://Not_A_Host/charts'}", source.ReasonInvalidManifest, "invalid OCI reference"},
		{"too many", strings.TrimPrefix(many, "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n"), source.ReasonLimitExceeded, "chart dependencies to fetch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, url := repo(t, map[string]string{
				"c/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n" + tc.chart + "\n",
				"c/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
			})
			_, err := r.Read(context.Background(), source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "c", Auth: auth})
			if source.ReasonOf(err) != tc.want || err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("%v (%s); want %s saying %q", err, source.ReasonOf(err), tc.want, tc.message)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the URL's password: %v", err)
			}
		})
	}
}

// A dependency's range follows its repository: a new version in it is a
// new render at the next read, without a change of the chart (the index
// is checked again after its max age; a refresh lists the registry's tags
// again), and a read where nothing moved is served from the render cache.
func TestADependencyRangeMovesToANewVersion(t *testing.T) {
	helmRepo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{})
	helmRepo.Publish(t, "db", "1.0.0", dependencyChart("db", "1.0.0"))
	registry := testenv.StartRegistry(t)
	registry.Push(t, "charts/cache", "2.0.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "cache", "2.0.0", dependencyChart("cache", "2.0.0"))))
	ociRepo := registry.URL("charts")
	_, _, url := repo(t, map[string]string{
		"shop/Chart.yaml": fmt.Sprintf("apiVersion: v2\nname: shop\nversion: 0.1.0\ndependencies:\n"+
			"- {name: db, version: ^1.0.0, repository: %q}\n- {name: cache, version: ^2.0.0, repository: %q}\n", helmRepo.URL, ociRepo),
	})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		AllowInsecureRegistries: true, HelmIndexMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "shop", Auth: auth,
		Render: render.Options{Helm: render.HelmOptions{ReleaseName: "shop", Namespace: "default"}},
		ChartRepositories: []source.ChartRepository{
			{URL: ociRepo, OCI: oci.Auth{Username: registry.Username, Password: registry.Password}, Insecure: true}}}
	ctx := context.Background()
	read := func(what string, refresh bool, want []string, renders int64) {
		t.Helper()
		req.Refresh = refresh
		res, err := r.Read(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := names(res); !cmp.Equal(got, want) {
			t.Errorf("%s: rendered %v, want %v", what, got, want)
		}
		if got := r.Renders(); got != renders {
			t.Errorf("%s: %d renders so far, want %d", what, got, renders)
		}
	}
	read("the first read", false, []string{"ConfigMap/cache-2-0-0", "ConfigMap/db-1-0-0"}, 1)
	read("nothing moved", false, []string{"ConfigMap/cache-2-0-0", "ConfigMap/db-1-0-0"}, 1)
	helmRepo.Publish(t, "db", "1.1.0", dependencyChart("db", "1.1.0"))
	read("db 1.1.0 published", false, []string{"ConfigMap/cache-2-0-0", "ConfigMap/db-1-1-0"}, 2)
	registry.Push(t, "charts/cache", "2.1.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "cache", "2.1.0", dependencyChart("cache", "2.1.0"))))
	read("cache 2.1.0 pushed, and a webhook's fresh read", true, []string{"ConfigMap/cache-2-1-0", "ConfigMap/db-1-1-0"}, 3)
	read("the next plain read", false, []string{"ConfigMap/cache-2-1-0", "ConfigMap/db-1-1-0"}, 3)

	// A dependency's repository down: the read fails naming it, rather
	// than serve the cached render it can no longer check.
	helmRepo.Stop()
	req.Refresh = false
	if _, err := r.Read(ctx, req); !errors.Is(err, source.ErrDependency) || source.ReasonOf(err) != source.ReasonSourceUnavailable ||
		!strings.Contains(err.Error(), `"db"`) {
		t.Errorf("with db's repository down: %v (%s); want SourceUnavailable naming db", err, source.ReasonOf(err))
	}
}

// The render of a chart whose dependencies were fetched with accounts is
// served only to reads with the same accounts: on a repository anyone may
// read (so every read resolves the dependency), a read with other
// accounts or none is rendered for itself, and each is then served its
// own.
func TestADependencyRenderIsCachedPerSetOfAccounts(t *testing.T) {
	helmRepo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true})
	helmRepo.Publish(t, "db", "1.0.0", dependencyChart("db", "1.0.0"))
	_, _, url := repo(t, map[string]string{
		"shop/Chart.yaml":        fmt.Sprintf("apiVersion: v2\nname: shop\nversion: 0.1.0\ndependencies:\n- {name: db, version: 1.0.0, repository: %q}\n", helmRepo.URL),
		"shop/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop\n",
	})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: helmRepo.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	read := func(accounts []source.ChartRepository) {
		t.Helper()
		req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "shop", Auth: auth,
			Render: render.Options{Helm: render.HelmOptions{ReleaseName: "shop", Namespace: "default"}}, ChartRepositories: accounts}
		res, err := r.Read(context.Background(), req)
		if err != nil || !cmp.Equal(names(res), []string{"ConfigMap/db-1-0-0", "ConfigMap/shop"}) {
			t.Fatalf("read with %d accounts: %v, %v", len(accounts), res, err)
		}
	}
	alice := []source.ChartRepository{{URL: helmRepo.URL, Helm: helmrepo.Auth{Username: "alice", Password: "a"}}}
	bob := []source.ChartRepository{{URL: helmRepo.URL, Helm: helmrepo.Auth{Username: "bob", Password: "b"}}}
	for i, step := range []struct {
		accounts []source.ChartRepository
		renders  int64
	}{{alice, 1}, {nil, 2}, {bob, 3}, {alice, 3}, {nil, 3}} {
		read(step.accounts)
		if got := r.Renders(); got != step.renders {
			t.Errorf("read %d: %d renders, want %d", i+1, got, step.renders)
		}
	}
}

// A dependency vendored under charts/ is found as Helm finds it, by the
// name in its Chart.yaml, whatever its folder or archive is called: it is
// not fetched (its repository here does not exist) and renders once.
func TestADependencyVendoredUnderAnotherNameIsNotFetched(t *testing.T) {
	_, _, url := repo(t, map[string]string{
		"shop/Chart.yaml": "apiVersion: v2\nname: shop\nversion: 0.1.0\ndependencies:\n" +
			"- {name: postgresql, version: ^12.0.0, repository: 'https://charts.invalid'}\n" +
			"- {name: redis, version: ^17.0.0, repository: 'https://charts.invalid'}\n",
		"shop/charts/pg.tgz":                  string(testenv.Chart(t, "postgresql", "12.1.0", dependencyChart("postgresql", "12.1.0"))),
		"shop/charts/cache/Chart.yaml":        "apiVersion: v2\nname: redis\nversion: 17.0.1\n",
		"shop/charts/cache/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: redis\n",
	})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Read(context.Background(), source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "shop", Auth: auth,
		Render: render.Options{Helm: render.HelmOptions{ReleaseName: "shop", Namespace: "default"}}})
	if err != nil {
		t.Fatalf("a chart whose dependencies are vendored under other names: %v", err)
	}
	if got, want := names(res), []string{"ConfigMap/postgresql-12-1-0", "ConfigMap/redis"}; !cmp.Equal(got, want) {
		t.Errorf("rendered %v, want %v", got, want)
	}
}
