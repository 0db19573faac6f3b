package reconcile

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
)

// helmChart is a chart whose one ConfigMap is named <release>-<name>,
// with the value color.
func helmChart(name string) map[string]string {
	return map[string]string{
		"values.yaml":      "color: blue\n",
		"values-prod.yaml": "color: red\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-" + name +
			"\ndata:\n  color: {{ .Values.color | quote }}\n",
	}
}

// helmApp makes an App that reads chart web (version range versions) of
// repo, with the repository's account in a Secret of username and
// password.
func helmApp(t *testing.T, repo *testenv.HelmRepository, versions string, spec *plumbv1.HelmSpec) client.ObjectKey {
	t.Helper()
	app := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: repo.URL, Chart: "web", Version: versions,
			SecretRef: &plumbv1.LocalObjectReference{Name: "charts"}}}
		a.Spec.Helm = spec
		noWait(a)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "charts"},
		StringData: map[string]string{"username": repo.Username, "password": repo.Password}}
	if err := admin(t).Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(app)
}

// An App whose source is a chart of a real Helm repository converges at
// <version>@sha256:<archive>, with spec.helm's values files (the chart's
// own) and values; an unchanged tick costs one conditional GET of the
// index; a new version in the range is applied and what left it pruned;
// an outage fails the Read phase and keeps the last good state.
func TestAnAppFromAHelmRepositoryConvergesAndKeepsItsLastGoodState(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "ci", Password: "s3cret-helm"})
	first := repo.Publish(t, "web", "1.0.0", helmChart("a"))
	repo.Publish(t, "web", "2.0.0", helmChart("outside-the-range"))
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	key := helmApp(t, repo, "^1", &plumbv1.HelmSpec{ReleaseName: "shop", ValuesFiles: []string{"values-prod.yaml"},
		Values: &apiextensionsv1.JSON{Raw: []byte(`{"unused":true}`)}})

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if want := "1.0.0@sha256:" + first; got.Status.LastAppliedRevision != want {
		t.Fatalf("applied %q, want %s", got.Status.LastAppliedRevision, want)
	}
	var a corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "shop-a"}, &a); err != nil || a.Data["color"] != "red" {
		t.Fatalf("ConfigMap shop-a: %v, data %v; want color red from the chart's values-prod.yaml", err, a.Data)
	}

	repo.Answered()
	ready(t, h.tick(t, key, queue.WakeTimer))
	if n := repo.Answered(); !cmp.Equal(n, map[string]int{"GET /charts/index.yaml 304": 1}) {
		t.Errorf("an unchanged tick asked the repository %v, want one 304 of the index", n)
	}

	moved := repo.Publish(t, "web", "1.1.0", helmChart("b"))
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if want := "1.1.0@sha256:" + moved; got.Status.LastAppliedRevision != want {
		t.Fatalf("applied %q after 1.1.0 was published, want %s", got.Status.LastAppliedRevision, want)
	}
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "shop-a"}})

	repo.Stop()
	got = h.tick(t, key, queue.WakeTimer)
	failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable")
	if want := "1.1.0@sha256:" + moved; got.Status.LastAppliedRevision != want {
		t.Errorf("after a failed read the applied revision is %q, want %s kept", got.Status.LastAppliedRevision, want)
	}
	var b corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "shop-b"}, &b); err != nil {
		t.Errorf("ConfigMap shop-b after the outage: %v, want it kept", err)
	}
	if msg := phaseStatus(got, PhaseRead).LastError; strings.Contains(msg, repo.Password) {
		t.Errorf("the Read phase's error shows the repository's password: %s", msg)
	}
}

func TestAPlainHTTPHelmRepositoryIsRefusedUnlessTheControllerAllowsIt(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "ci", Password: "s3cret-helm"})
	repo.Publish(t, "web", "1.0.0", helmChart("a"))
	key := helmApp(t, repo, "", nil)
	got := newHarness(t).tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceRefused"); !strings.Contains(msg, "--allow-insecure-registries") {
		t.Errorf("Ready message %q does not name the flag", msg)
	}
}

// A Helm source in an OCI registry (charts pushed as `helm push` does)
// reads oci://<repository>/<chart> at the highest tag in the range, its
// chart layer rendered as a chart: recorded as <version>@<manifest>, an
// unchanged tick one manifest HEAD.
func TestAnAppFromAnOCIHelmRepositoryConverges(t *testing.T) {
	ctx := context.Background()
	registry := testenv.StartRegistry(t)
	registry.Push(t, "charts/web", "1.0.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "web", "1.0.0", helmChart("a"))))
	highest := registry.Push(t, "charts/web", "1.2.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "web", "1.2.0", helmChart("b"))))
	registry.Push(t, "charts/web", "2.0.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "web", "2.0.0", helmChart("c"))))
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	app := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: registry.URL("charts"), Chart: "web", Version: ">=1.0.0 <2",
			Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: "registry"}}}
		a.Spec.Helm = &plumbv1.HelmSpec{ValuesFiles: []string{"values-prod.yaml"}}
		noWait(a)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}}
	if err := admin(t).Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(app)

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if want := "1.2.0@" + highest; got.Status.LastAppliedRevision != want {
		t.Fatalf("applied %q, want %s", got.Status.LastAppliedRevision, want)
	}
	var b corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "app-b"}, &b); err != nil || b.Data["color"] != "red" {
		t.Fatalf("ConfigMap app-b: %v, data %v; want color red from the chart's values-prod.yaml", err, b.Data)
	}
	h.registry.Reset()
	ready(t, h.tick(t, key, queue.WakeTimer))
	if n := h.registry.Reset(); n["GET blobs"] != 0 || n["HEAD manifests"] != 1 {
		t.Errorf("an unchanged tick asked the registry %v, want one manifest HEAD and no blob", n)
	}
}

// A chart whose dependencies are not vendored converges with them
// fetched from their repositories: a private HTTP Helm repository and a
// private OCI registry, each account from a Secret of the App's
// namespace named in spec.helm.repositories. Without the account the
// Read phase fails naming the dependency, and nothing is pruned.
func TestAChartsDependenciesComeFromTheirRepositoriesWithTheNamespacesAccounts(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "ci", Password: "s3cret-helm"})
	deps := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "db-reader", Password: "s3cret-db"})
	deps.Publish(t, "db", "1.0.0", helmChart("db"))
	registry := testenv.StartRegistry(t)
	registry.Push(t, "charts/cache", "2.0.0", testenv.HelmChartArtifact(t, testenv.Chart(t, "cache", "2.0.0", helmChart("cache"))))
	web := helmChart("a")
	web["Chart.yaml"] = "apiVersion: v2\nname: web\nversion: 1.0.0\ndependencies:\n" +
		"- {name: db, version: ^1.0.0, repository: '" + deps.URL + "'}\n" +
		"- {name: cache, version: 2.0.0, repository: '" + registry.URL("charts") + "'}\n"
	repo.Publish(t, "web", "1.0.0", web)
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	spec := &plumbv1.HelmSpec{ReleaseName: "shop", Repositories: []plumbv1.ChartRepository{
		{URL: deps.URL, SecretRef: &plumbv1.LocalObjectReference{Name: "db-charts"}},
		{URL: registry.URL("charts"), SecretRef: &plumbv1.LocalObjectReference{Name: "registry"}, Insecure: true},
	}}
	key := helmApp(t, repo, "", spec)
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "db-charts"},
			StringData: map[string]string{"username": deps.Username, "password": deps.Password}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}},
	} {
		if err := admin(t).Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	ready(t, h.tick(t, key, queue.WakeTimer))
	for _, name := range []string{"shop-a", "shop-db", "shop-cache"} {
		var cm corev1.ConfigMap
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, &cm); err != nil {
			t.Errorf("ConfigMap %s: %v", name, err)
		}
	}

	// The account of the dependency's repository is taken away: a fresh
	// read fails naming the dependency, and what was applied stays.
	updateApp(t, h, key, func(a *plumbv1.App) { a.Spec.Helm.Repositories = a.Spec.Helm.Repositories[1:] })
	got := h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable"); !strings.Contains(msg, `dependency "db"`) {
		t.Errorf("Ready message %q does not name the dependency", msg)
	}
	var cm corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "shop-db"}, &cm); err != nil {
		t.Errorf("ConfigMap shop-db after the failed read: %v, want it kept", err)
	}
	if msg := phaseStatus(got, PhaseRead).LastError; strings.Contains(msg, deps.Password) || strings.Contains(msg, repo.Password) {
		t.Errorf("the Read phase's error shows a password: %s", msg)
	}
}

// A dependency's repository over plain HTTP, named in spec.helm.repositories,
// is refused unless the controller allows insecure registries.
func TestAnInsecureChartRepositoryIsRefusedUnlessTheControllerAllowsIt(t *testing.T) {
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true})
	repo.Publish(t, "web", "1.0.0", helmChart("a"))
	key := helmApp(t, repo, "", &plumbv1.HelmSpec{Repositories: []plumbv1.ChartRepository{{URL: "oci://registry.invalid/charts", Insecure: true}}})
	got := newHarness(t).tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceRefused"); !strings.Contains(msg, "helm.repositories") {
		t.Errorf("Ready message %q does not name helm.repositories", msg)
	}
}

// An App of an HTTP repository's chart that asks for its provenance
// applies only versions whose .prov a trusted OpenPGP key signed and that
// vouches for the archive read: an unsigned version, one signed by
// another key and a tampered archive (a republished version whose index
// entry and archive were replaced, its old .prov kept) fail the Read phase
// with VerificationFailed, nothing of them is applied and the last
// verified version stays; an unchanged verified tick asks only the index.
func TestAHelmAppWithProvenanceAppliesOnlySignedVersions(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "ci", Password: "s3cret-helm"})
	trusted, stranger := testenv.GeneratePGPKey(t, "release"), testenv.GeneratePGPKey(t, "stranger")
	first := repo.Publish(t, "web", "1.0.0", helmChart("a"))
	repo.Sign(t, "web-1.0.0.tgz", trusted)
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	key := helmApp(t, repo, "^1", &plumbv1.HelmSpec{ReleaseName: "shop"})
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "release-keys"},
		Data: map[string][]byte{"release.asc": trusted.Public}}
	if err := admin(t).Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	updateApp(t, h, key, func(app *plumbv1.App) {
		app.Spec.Source.Helm.Verify = &plumbv1.OCIVerification{Provider: plumbv1.VerifyProviderHelm, SecretRef: plumbv1.LocalObjectReference{Name: keys.Name}}
	})
	verified := func(t *testing.T, app *plumbv1.App, want metav1.ConditionStatus, reason, says string) {
		t.Helper()
		c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionSourceVerified)
		if c == nil || c.Status != want || c.Reason != reason || !strings.Contains(c.Message, says) {
			t.Errorf("SourceVerified = %+v, want %s/%s saying %q", c, want, reason, says)
		}
	}
	kept := func(t *testing.T, got *plumbv1.App, notApplied string) {
		t.Helper()
		if want := "1.0.0@sha256:" + first; got.Status.LastAppliedRevision != want {
			t.Errorf("applied %q, want %s kept", got.Status.LastAppliedRevision, want)
		}
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "shop-a"}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap shop-a of the verified version: %v, want it kept", err)
		}
		if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: notApplied}, &corev1.ConfigMap{}); err == nil {
			t.Errorf("ConfigMap %s of an unverified version was applied", notApplied)
		}
	}

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	verified(t, got, metav1.ConditionTrue, plumbv1.ReasonVerified, "release.asc")
	if want := "1.0.0@sha256:" + first; got.Status.LastAppliedRevision != want {
		t.Fatalf("applied %q, want %s", got.Status.LastAppliedRevision, want)
	}
	repo.Answered()
	ready(t, h.tick(t, key, queue.WakeTimer))
	if n := repo.Answered(); !cmp.Equal(n, map[string]int{"GET /charts/index.yaml 304": 1}) {
		t.Errorf("an unchanged verified tick asked the repository %v, want one 304 of the index", n)
	}

	repo.Publish(t, "web", "1.1.0", helmChart("unsigned"))
	got = h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "VerificationFailed"); !strings.Contains(msg, "no provenance file") {
		t.Errorf("an unsigned version: %q does not say it has no provenance", msg)
	}
	verified(t, got, metav1.ConditionFalse, plumbv1.ReasonVerificationFailed, "no provenance file")
	kept(t, got, "shop-unsigned")

	repo.Sign(t, "web-1.1.0.tgz", stranger)
	got = h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "VerificationFailed"); !strings.Contains(msg, "no trusted key signed it") {
		t.Errorf("a version signed by another key: %q", msg)
	}
	kept(t, got, "shop-unsigned")

	// Signed by the trusted key, then republished with other content: the
	// old provenance no longer vouches for the archive the index names.
	repo.Sign(t, "web-1.1.0.tgz", trusted)
	repo.Publish(t, "web", "1.1.0", helmChart("tampered"))
	got = h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "VerificationFailed"); !strings.Contains(msg, "the archive read is") {
		t.Errorf("a tampered archive: %q", msg)
	}
	kept(t, got, "shop-tampered")

	// Signed as it is now: applied.
	repo.Sign(t, "web-1.1.0.tgz", trusted)
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	verified(t, got, metav1.ConditionTrue, plumbv1.ReasonVerified, "release.asc")
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "shop-tampered"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("ConfigMap shop-tampered once signed: %v", err)
	}
}
