package crd_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// cluster is the package's local control plane, started once in TestMain.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
}

// setup installs the CRD (idempotent) and returns a client and a fresh
// namespace for the test.
func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	ctx := context.Background()
	if err := crd.Install(ctx, cluster.Config); err != nil {
		t.Fatalf("Install: %v", err)
	}
	c := cluster.Client(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crd-test-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return c, ns.Name
}

func validApp(namespace, name string) *plumbv1.App {
	return &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{
				URL:  "https://git.example.com/org/repo.git",
				Ref:  plumbv1.GitRef{Branch: "main"},
				Path: "deploy/prod",
			},
		},
	}
}

func TestValidAppIsAcceptedDefaultedAndReadBack(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	app := validApp(ns, "web")
	app.Spec.Source.SecretRef = &plumbv1.LocalObjectReference{Name: "git-credentials"}
	if err := c.Create(ctx, app); err != nil {
		t.Fatalf("creating a valid App: %v", err)
	}
	var got plumbv1.App
	if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
		t.Fatalf("reading the App back: %v", err)
	}
	want := plumbv1.AppSpec{
		Source:      app.Spec.Source,
		Interval:    &metav1.Duration{Duration: 3 * time.Minute},
		Prune:       ptr.To(true),
		DriftPolicy: plumbv1.DriftPolicyHeal,
		Wait:        ptr.To(true),
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("App spec read back (-want +got):\n%s", diff)
	}
	if got.Spec.IntervalOrDefault() != 3*time.Minute || !got.Spec.PruneEnabled() || got.Spec.TimeoutOrDefault() != 3*time.Minute ||
		!got.Spec.WaitEnabled() || got.Spec.HealthTimeoutOrDefault() != 5*time.Minute {
		t.Errorf("defaults: interval %s, prune %v, timeout %s, wait %v, health timeout %s", got.Spec.IntervalOrDefault(), got.Spec.PruneEnabled(),
			got.Spec.TimeoutOrDefault(), got.Spec.WaitEnabled(), got.Spec.HealthTimeoutOrDefault())
	}

	t.Run("status is a subresource the controller writes", func(t *testing.T) {
		got.Status.LastAppliedRevision = "main@sha1:" + strings.Repeat("a", 40)
		got.Status.Conditions = []metav1.Condition{{
			Type: plumbv1.ConditionReady, Status: metav1.ConditionTrue, Reason: plumbv1.ReasonSucceeded,
			Message: "applied", LastTransitionTime: metav1.Now(),
		}, {
			Type: plumbv1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: plumbv1.ReasonHealthy,
			Message: "all 1 objects are Current", LastTransitionTime: metav1.Now(),
		}}
		got.Status.Health = &plumbv1.HealthStatus{Current: 1}
		got.Status.Drift = &plumbv1.DriftSummary{Count: 1, Objects: []plumbv1.DriftedObject{{
			ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: "settings"},
			Fields:    []string{"/data/color"}, Managers: []string{"kubectl-edit"},
		}}}
		got.Status.Shard = "plumb-1"
		if err := c.Status().Update(ctx, &got); err != nil {
			t.Fatalf("updating status: %v", err)
		}
		out, err := exec.Command(cluster.Binaries.Path("kubectl"), "--kubeconfig", cluster.KubeconfigPath,
			"get", "apps.plumb.dev", "-n", ns, "web").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get apps: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get apps printed %q", out)
		}
		if header := strings.Fields(lines[0]); !cmp.Equal(header, []string{"NAME", "READY", "REASON", "HEALTH", "REVISION", "DRIFT", "SHARD", "AGE"}) {
			t.Errorf("printer columns = %v, want NAME READY REASON HEALTH REVISION DRIFT SHARD AGE", header)
		}
		row := strings.Fields(lines[1])
		if len(row) < 7 || row[1] != "True" || row[2] != plumbv1.ReasonSucceeded || row[3] != plumbv1.ReasonHealthy ||
			row[4] != got.Status.LastAppliedRevision || row[5] != "1" || row[6] != "plumb-1" {
			t.Errorf("row = %v, want web True Succeeded Healthy %s 1 plumb-1 <age>", row, got.Status.LastAppliedRevision)
		}
	})
}

// A Git source written as git reads back as written and is the same
// source as the flat spelling: one kind, one location, one ref.
func TestAGitSourceIsAcceptedInEitherSpelling(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	nested := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nested"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{Path: "deploy", Git: &plumbv1.GitSource{
			URL: "https://github.com/org/repo", Ref: plumbv1.GitRef{Tag: "v1.2.0"},
			SecretRef: &plumbv1.LocalObjectReference{Name: "git-credentials"}}}}}
	flat := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flat"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{Path: "deploy", URL: "https://github.com/org/repo", Ref: plumbv1.GitRef{Tag: "v1.2.0"},
			SecretRef: &plumbv1.LocalObjectReference{Name: "git-credentials"}}}}
	var read [2]plumbv1.App
	for i, app := range []*plumbv1.App{nested, flat} {
		if err := c.Create(ctx, app); err != nil {
			t.Fatalf("creating %s: %v", app.Name, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), &read[i]); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(app.Spec.Source, read[i].Spec.Source); diff != "" {
			t.Errorf("%s: the source read back differs (-sent +read):\n%s", app.Name, diff)
		}
		if read[i].Spec.Source.Kind() != plumbv1.SourceKindGit || read[i].Spec.Source.Location() != "https://github.com/org/repo" {
			t.Errorf("%s: kind %q, location %q", app.Name, read[i].Spec.Source.Kind(), read[i].Spec.Source.Location())
		}
	}
	if diff := cmp.Diff(read[1].Spec.Source.GitRepository(), read[0].Spec.Source.GitRepository()); diff != "" {
		t.Errorf("the two spellings name different Git sources (-flat +git):\n%s", diff)
	}
	read[0].Spec.Source.SetGitRef(plumbv1.GitRef{Branch: "main"})
	read[1].Spec.Source.SetGitRef(plumbv1.GitRef{Branch: "main"})
	if read[0].Spec.Source.Git.Ref.Branch != "main" || read[1].Spec.Source.Ref.Branch != "main" {
		t.Errorf("SetGitRef did not set the ref where it is written: %+v, %+v", read[0].Spec.Source, read[1].Spec.Source)
	}
}

func TestAnOCISourceIsAcceptedAndReadBack(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	for i, ref := range []plumbv1.OCIRef{{}, {Tag: "v1.2.0"}, {SemVer: ">=1.0.0 <2"}, {Digest: "sha256:" + strings.Repeat("ab", 32)}} {
		app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("oci-%d", i)},
			Spec: plumbv1.AppSpec{Source: plumbv1.Source{Path: "deploy", OCI: &plumbv1.OCISource{
				URL: "oci://registry.example.com:5000/org/app", Ref: ref, Insecure: true,
				LayerSelector: &plumbv1.OCILayerSelector{MediaType: "application/vnd.cncf.flux.content.v1.tar+gzip"},
				SecretRef:     &plumbv1.LocalObjectReference{Name: "registry-credentials"}}}}}
		if err := c.Create(ctx, app); err != nil {
			t.Fatalf("creating an OCI App with ref %+v: %v", ref, err)
		}
		var got plumbv1.App
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(app.Spec.Source, got.Spec.Source); diff != "" {
			t.Errorf("the source read back differs (-sent +read):\n%s", diff)
		}
		if got.Spec.Source.Kind() != plumbv1.SourceKindOCI || got.Spec.Source.Location() != "oci://registry.example.com:5000/org/app" {
			t.Errorf("kind %q, location %q", got.Spec.Source.Kind(), got.Spec.Source.Location())
		}
	}
}

func TestAHelmSourceIsAcceptedAndReadBack(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	for i, h := range []plumbv1.HelmSource{
		{Repository: "https://charts.example.com/stable", Chart: "web", Version: ">=1.2.0 <2",
			SecretRef: &plumbv1.LocalObjectReference{Name: "repository-credentials"}},
		{Repository: "http://chartmuseum.tools.svc:8080", Chart: "web_app-2"},
		{Repository: "oci://registry.example.com:5000/charts", Chart: "web", Version: "1.2.3", Insecure: true,
			Verify: &plumbv1.OCIVerification{Provider: "cosign", SecretRef: plumbv1.LocalObjectReference{Name: "keys"}}},
	} {
		app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("helm-%d", i)},
			Spec: plumbv1.AppSpec{Source: plumbv1.Source{Helm: &h}, Helm: &plumbv1.HelmSpec{ValuesFiles: []string{"values-prod.yaml"}}}}
		if err := c.Create(ctx, app); err != nil {
			t.Fatalf("creating a Helm App from %s: %v", h.Repository, err)
		}
		var got plumbv1.App
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(app.Spec.Source, got.Spec.Source); diff != "" {
			t.Errorf("the source read back differs (-sent +read):\n%s", diff)
		}
		if got.Spec.Source.Kind() != plumbv1.SourceKindHelm || got.Spec.Source.Location() != h.Repository {
			t.Errorf("kind %q, location %q", got.Spec.Source.Kind(), got.Spec.Source.Location())
		}
	}
}

func TestABucketSourceIsAcceptedAndReadBack(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bucket"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{Path: "web", Bucket: &plumbv1.BucketSource{Endpoint: "minio.storage.svc:9000", Bucket: "deploy",
			Prefix: "prod/", Region: "eu-west-1", Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: "s3"}}},
			Helm: &plumbv1.HelmSpec{Repositories: []plumbv1.ChartRepository{{URL: "oci://registry.example.com/charts", Insecure: true,
				SecretRef: &plumbv1.LocalObjectReference{Name: "registry"}}}}}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatalf("creating a bucket App: %v", err)
	}
	var got plumbv1.App
	if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(app.Spec.Source, got.Spec.Source); diff != "" {
		t.Errorf("the source read back differs (-sent +read):\n%s", diff)
	}
	if diff := cmp.Diff(app.Spec.Helm, got.Spec.Helm); diff != "" {
		t.Errorf("spec.helm read back differs (-sent +read):\n%s", diff)
	}
	if got.Spec.Source.Kind() != plumbv1.SourceKindBucket || got.Spec.Source.Location() != "s3://minio.storage.svc:9000/deploy/prod" {
		t.Errorf("kind %q, location %q", got.Spec.Source.Kind(), got.Spec.Source.Location())
	}
}

func TestSupportedURLFormsAreAccepted(t *testing.T) {
	c, ns := setup(t)
	for i, url := range []string{
		"https://github.com/org/repo",
		"http://gitea.gitea.svc:3000/org/repo.git",
		"ssh://git@github.com/org/repo.git",
		"ssh://git@gitlab.example.com:2222/group/sub/repo",
		"git@github.com:org/repo.git",
		"file:///srv/git/repo",
	} {
		app := validApp(ns, fmt.Sprintf("url-%d", i))
		app.Spec.Source.URL = url
		if err := c.Create(context.Background(), app); err != nil {
			t.Errorf("url %q rejected: %v", url, err)
		}
	}
}

func TestInvalidAppsAreRejectedWithAClearMessage(t *testing.T) {
	c, ns := setup(t)
	tests := []struct {
		name        string
		mutate      func(*plumbv1.App)
		wantMessage string
	}{{
		name:        "two ref kinds at once",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Ref = plumbv1.GitRef{Branch: "main", Tag: "v1.0.0"} },
		wantMessage: "ref must set exactly one of branch, tag, semver or commit",
	}, {
		name:        "no ref",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Ref = plumbv1.GitRef{} },
		wantMessage: "a Git source sets url and ref together",
	}, {
		name:        "no source",
		mutate:      func(a *plumbv1.App) { a.Spec.Source = plumbv1.Source{} },
		wantMessage: "source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket",
	}, {
		name: "a Git and an OCI source at once",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source.OCI = &plumbv1.OCISource{URL: "oci://registry.example.com/org/app"}
		},
		wantMessage: "source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket",
	}, {
		name: "an OCI source with the Git source's secretRef",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app"},
				SecretRef: &plumbv1.LocalObjectReference{Name: "creds"}}
		},
		wantMessage: "secretRef is the Git repository's credentials; an OCI, Helm or bucket source names its own in oci.secretRef, helm.secretRef or bucket.secretRef",
	}, {
		name: "an OCI url with a tag in it",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app:v1"}}
		},
		wantMessage: "url must be oci://host[:port]/repository, with the tag or digest in ref",
	}, {
		name: "an OCI url over https://",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "https://registry.example.com/org/app"}}
		},
		wantMessage: "url must be oci://host[:port]/repository, with the tag or digest in ref",
	}, {
		name: "an OCI ref with a tag and a digest",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app",
				Ref: plumbv1.OCIRef{Tag: "v1", Digest: "sha256:" + strings.Repeat("0", 64)}}}
		},
		wantMessage: "ref must set at most one of tag, semver or digest",
	}, {
		name: "an OCI digest that is not sha256",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app",
				Ref: plumbv1.OCIRef{Digest: "sha1:" + strings.Repeat("0", 40)}}}
		},
		wantMessage: "spec.source.oci.ref.digest in body should match",
	}, {
		name: "an OCI and a Helm source at once",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app"},
				Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web"}}
		},
		wantMessage: "source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket",
	}, {
		name: "a Helm source with a path",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Path: "deploy", Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web"}}
		},
		wantMessage: "path is not used by a Helm source",
	}, {
		name: "a Helm repository with credentials in its URL",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://ci:s3cret@charts.example.com", Chart: "web"}}
		},
		wantMessage: "repository must be https://host/path or oci://host/path",
	}, {
		name: "a Helm chart name with a slash",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "../web"}}
		},
		wantMessage: "spec.source.helm.chart in body should match",
	}, {
		name: "insecure on an HTTP Helm repository",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web", Insecure: true}}
		},
		wantMessage: "insecure is for oci:// repositories",
	}, {
		name: "cosign verification of an HTTP Helm repository's chart",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web",
				Verify: &plumbv1.OCIVerification{Provider: "cosign", SecretRef: plumbv1.LocalObjectReference{Name: "keys"}}}}
		},
		wantMessage: "verify.provider is cosign for a chart in an OCI registry, helm (its provenance file) for one of an HTTP repository",
	}, {
		name: "provenance verification of a chart in an OCI registry",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "oci://registry.example.com/charts", Chart: "web",
				Verify: &plumbv1.OCIVerification{Provider: "helm", SecretRef: plumbv1.LocalObjectReference{Name: "keys"}}}}
		},
		wantMessage: "verify.provider is cosign for a chart in an OCI registry, helm (its provenance file) for one of an HTTP repository",
	}, {
		name: "provenance verification of an OCI artifact",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app",
				Verify: &plumbv1.OCIVerification{Provider: "helm", SecretRef: plumbv1.LocalObjectReference{Name: "keys"}}}}
		},
		wantMessage: "an OCI artifact's verify.provider is cosign",
	}, {
		name: "git beside the flat url and ref",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source.Git = &plumbv1.GitSource{URL: "https://github.com/org/other", Ref: plumbv1.GitRef{Branch: "main"}}
		},
		wantMessage: "git holds the Git repository's url, ref and secretRef: set them in git or flat beside it, not both",
	}, {
		name: "git beside a flat secretRef",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Git: &plumbv1.GitSource{URL: "https://github.com/org/repo", Ref: plumbv1.GitRef{Branch: "main"}},
				SecretRef: &plumbv1.LocalObjectReference{Name: "creds"}}
		},
		wantMessage: "git holds the Git repository's url, ref and secretRef: set them in git or flat beside it, not both",
	}, {
		name: "git and an OCI source at once",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Git: &plumbv1.GitSource{URL: "https://github.com/org/repo", Ref: plumbv1.GitRef{Branch: "main"}},
				OCI: &plumbv1.OCISource{URL: "oci://registry.example.com/org/app"}}
		},
		wantMessage: "source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket",
	}, {
		name: "git without a ref",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Git: &plumbv1.GitSource{URL: "https://github.com/org/repo"}}
		},
		wantMessage: "ref must set exactly one of branch, tag, semver or commit",
	}, {
		name: "git with an ftp:// url",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Git: &plumbv1.GitSource{URL: "ftp://x", Ref: plumbv1.GitRef{Branch: "main"}}}
		},
		wantMessage: "url must be https://, http://, ssh://, file:// or scp-like user@host:org/repo",
	}, {
		name: "a Git and a bucket source at once",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source.Bucket = &plumbv1.BucketSource{Endpoint: "s3.amazonaws.com", Bucket: "deploy"}
		},
		wantMessage: "source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket",
	}, {
		name: "a bucket endpoint with a scheme",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "https://s3.amazonaws.com", Bucket: "deploy"}}
		},
		wantMessage: "spec.source.bucket.endpoint in body should match",
	}, {
		name: "a bucket prefix that climbs",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.amazonaws.com", Bucket: "deploy", Prefix: "../other"}}
		},
		wantMessage: "prefix must be a relative folder",
	}, {
		name: "a bucket region that is not a region's name",
		mutate: func(a *plumbv1.App) {
			a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.amazonaws.com", Bucket: "deploy", Region: "eu west/1"}}
		},
		wantMessage: "spec.source.bucket.region in body should match",
	}, {
		name: "a chart dependency's repository that is not a URL",
		mutate: func(a *plumbv1.App) {
			a.Spec.Helm = &plumbv1.HelmSpec{Repositories: []plumbv1.ChartRepository{{URL: "@bitnami"}}}
		},
		wantMessage: "url must be an https://, http:// or oci:// URL",
	}, {
		name:        "interval 1s",
		mutate:      func(a *plumbv1.App) { a.Spec.Interval = &metav1.Duration{Duration: time.Second} },
		wantMessage: "interval must be at least 10s",
	}, {
		name:        "healthTimeout 500ms",
		mutate:      func(a *plumbv1.App) { a.Spec.HealthTimeout = &metav1.Duration{Duration: 500 * time.Millisecond} },
		wantMessage: "healthTimeout must be at least 1s",
	}, {
		name:        "dependsOn an App with an invalid name",
		mutate:      func(a *plumbv1.App) { a.Spec.DependsOn = []plumbv1.AppReference{{Name: "Not_A_Name"}} },
		wantMessage: "spec.dependsOn[0].name",
	}, {
		name:        "path ../x",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Path = "../x" },
		wantMessage: "path must be relative to the repository root and must not contain '..'",
	}, {
		name:        "path with .. inside",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Path = "deploy/../../etc" },
		wantMessage: "path must be relative to the repository root and must not contain '..'",
	}, {
		name:        "absolute path",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Path = "/etc" },
		wantMessage: "path must be relative to the repository root and must not contain '..'",
	}, {
		name:        "url ftp://x",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.URL = "ftp://x" },
		wantMessage: "url must be https://, http://, ssh://, file:// or scp-like user@host:org/repo",
	}, {
		name:        "scp-like url whose path go-git would read from the local disk",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.URL = `git@host:\/../../var/lib/other/repo.git` },
		wantMessage: "url must be https://, http://, ssh://, file:// or scp-like user@host:org/repo",
	}, {
		name:        "commit that is not a full sha1",
		mutate:      func(a *plumbv1.App) { a.Spec.Source.Ref = plumbv1.GitRef{Commit: "abc123"} },
		wantMessage: `spec.source.ref.commit: Invalid value: "abc123": spec.source.ref.commit in body should match '^[0-9a-f]{40}$'`,
	}, {
		name: "helm values file outside the repository",
		mutate: func(a *plumbv1.App) {
			a.Spec.Helm = &plumbv1.HelmSpec{ValuesFiles: []string{"values/prod.yaml", "../secrets.yaml"}}
		},
		wantMessage: "valuesFiles must be relative to the repository root and must not contain '..'",
	}, {
		name:        "helm release name that is not a DNS label",
		mutate:      func(a *plumbv1.App) { a.Spec.Helm = &plumbv1.HelmSpec{ReleaseName: "Web_1"} },
		wantMessage: "spec.helm.releaseName in body should match",
	}, {
		name:        "unknown drift policy",
		mutate:      func(a *plumbv1.App) { a.Spec.DriftPolicy = "ignore" },
		wantMessage: `spec.driftPolicy: Unsupported value: "ignore": supported values: "heal", "alert"`,
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := validApp(ns, fmt.Sprintf("invalid-%d", i))
			tt.mutate(app)
			err := c.Create(context.Background(), app)
			if err == nil {
				t.Fatalf("the API server accepted an invalid App: %+v", app.Spec)
			}
			if !strings.Contains(err.Error(), tt.wantMessage) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.wantMessage)
			}
		})
	}
}

func TestSecretRefCannotNameAnotherNamespace(t *testing.T) {
	c, ns := setup(t)
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "plumb.dev/v1alpha1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "cross-namespace", "namespace": ns},
		"spec": map[string]any{"source": map[string]any{
			"url":       "https://git.example.com/org/repo",
			"ref":       map[string]any{"branch": "main"},
			"secretRef": map[string]any{"name": "creds", "namespace": "kube-system"},
		}},
	}}
	err := c.Create(context.Background(), app, client.FieldValidation(metav1.FieldValidationStrict))
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.source.secretRef.namespace"`) {
		t.Errorf("creating an App whose secretRef names a namespace: got %v, want an unknown field error", err)
	}
}

func TestHelmChartCarriesTheGeneratedCRDs(t *testing.T) {
	for file, generated := range map[string][]byte{"plumb.dev_apps.yaml": crd.YAML(), "plumb.dev_notifications.yaml": crd.NotificationYAML()} {
		chartCRD, err := os.ReadFile("../../../charts/plumb/crds/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(generated), string(chartCRD)); diff != "" {
			t.Errorf("charts/plumb/crds/%s differs from the generated CRD; run `make generate` (-generated +chart):\n%s", file, diff)
		}
	}
}

// A Notification is checked by the API server: a sink without an address,
// or a commit status sink without a Secret for its token, is refused with
// the rule's message.
func TestInvalidNotificationsAreRejectedWithAClearMessage(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	valid := plumbv1.Notification{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"},
		Spec:       plumbv1.NotificationSpec{Type: plumbv1.SinkWebhook, Address: "https://hooks.example.com/plumb"},
	}
	if err := c.Create(ctx, &valid); err != nil {
		t.Fatalf("a valid Notification was refused: %v", err)
	}
	for _, tt := range []struct {
		name string
		spec plumbv1.NotificationSpec
		want string
	}{
		{"no address", plumbv1.NotificationSpec{Type: plumbv1.SinkSlack}, "address (or a secretRef"},
		{"no token", plumbv1.NotificationSpec{Type: plumbv1.SinkGitHub}, "needs a secretRef"},
		{"unknown type", plumbv1.NotificationSpec{Type: "pager", Address: "https://x.example.com"}, "Unsupported value"},
		{"not http", plumbv1.NotificationSpec{Type: plumbv1.SinkWebhook, Address: "file:///etc/passwd"}, "should match"},
		{"unknown event", plumbv1.NotificationSpec{Type: plumbv1.SinkWebhook, Address: "https://x.example.com", Events: []plumbv1.NotificationEvent{"Everything"}}, "Unsupported value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := plumbv1.Notification{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: tt.spec}
			err := c.Create(ctx, &n)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHelmOptionsRoundTrip(t *testing.T) {
	c, ns := setup(t)
	ctx := context.Background()
	app := validApp(ns, "chart")
	app.Spec.Helm = &plumbv1.HelmSpec{
		ReleaseName: "web",
		ValuesFiles: []string{"values/prod.yaml"},
		Values:      &apiextensionsv1.JSON{Raw: []byte(`{"replicas":3,"image":{"tag":"1.28"}}`)},
	}
	if err := c.Create(ctx, app); err != nil {
		t.Fatalf("creating an App with helm options: %v", err)
	}
	var got plumbv1.App
	if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
		t.Fatal(err)
	}
	values, err := got.Spec.Helm.ValuesMap()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"replicas": float64(3), "image": map[string]any{"tag": "1.28"}}
	if diff := cmp.Diff(want, values); diff != "" {
		t.Errorf("helm values read back (-want +got):\n%s", diff)
	}
}

// kubectl get apps -o wide shows the destination of an App (a column of
// priority 1, so not in the default listing).
func TestTheWideListingShowsTheDestination(t *testing.T) {
	def, err := crd.App()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range def.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Name == "Destination" {
			if c.JSONPath != ".status.destination" || c.Priority != 1 {
				t.Errorf("the Destination column %+v, want .status.destination at priority 1", c)
			}
			return
		}
	}
	t.Error("the CRD has no Destination column")
}
