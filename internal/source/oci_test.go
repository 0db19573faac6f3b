package source_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// ociReader reads registries through requests, plain HTTP allowed as
// the test registry serves it.
func ociReader(t *testing.T, requests *testenv.RegistryRequests, allowInsecure bool) *source.Reader {
	t.Helper()
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: requests, AllowInsecureRegistries: allowInsecure})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAnOCIArtifactIsReadAndRenderedLikeACommit(t *testing.T) {
	registry := testenv.StartRegistry(t)
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: k-\nresources: [a.yaml]\n"
	digest := registry.PushFiles(t, "plumb/app", "v1", map[string]string{
		"deploy/kustomization.yaml": kustomization, "deploy/a.yaml": configMap("a", "1"), "other/x.yaml": "not: [yaml",
	})
	requests := &testenv.RegistryRequests{}
	r := ociReader(t, requests, true)
	account := oci.Auth{Username: registry.Username, Password: registry.Password}
	req := source.Request{Path: "deploy", OCI: &source.OCIRequest{URL: registry.URL("plumb/app"), Ref: oci.Ref{Tag: "v1"},
		Auth: account, Insecure: true}}
	ctx := context.Background()

	first, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Revision.String(); got != "v1@"+digest || first.Cached || !cmp.Equal(names(first), []string{"ConfigMap/k-a"}) {
		t.Fatalf("first read: %s cached=%v %v; want v1@%s, rendered by Kustomize", got, first.Cached, names(first), digest)
	}
	if first.Engine != "kustomize" {
		t.Errorf("engine %q, want kustomize", first.Engine)
	}
	requests.Reset()
	second, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Reset(); !second.Cached || !cmp.Equal(n, map[string]int{"HEAD manifests": 1}) || r.Renders() != 1 {
		t.Errorf("an unchanged tick: cached=%v with requests %v after %d renders; want one manifest HEAD, no blob, 1 render", second.Cached, n, r.Renders())
	}

	// The render is cached for the account that proved access: another
	// account, on the same Reader, is refused and not served it.
	stranger := req
	stranger.OCI = &source.OCIRequest{URL: req.OCI.URL, Ref: req.OCI.Ref, Auth: oci.Auth{Username: registry.Username, Password: "not-the-password"}, Insecure: true}
	if got, err := r.Read(ctx, stranger); !errors.Is(err, oci.ErrUnauthorized) {
		t.Errorf("another account's read of a cached render: %v, %v; want ErrUnauthorized", got, err)
	}
	anonymous := req
	anonymous.OCI = &source.OCIRequest{URL: req.OCI.URL, Ref: req.OCI.Ref, Insecure: true}
	if got, err := r.Read(ctx, anonymous); !errors.Is(err, oci.ErrUnauthorized) {
		t.Errorf("an anonymous read of a cached render: %v, %v; want ErrUnauthorized", got, err)
	}

	moved := registry.PushFiles(t, "plumb/app", "v1", map[string]string{"deploy/b.yaml": configMap("b", "2")})
	third, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if third.Revision.String() != "v1@"+moved || third.Cached || !cmp.Equal(names(third), []string{"ConfigMap/b"}) {
		t.Errorf("after the tag moved: %s cached=%v %v; want v1@%s with ConfigMap/b", third.Revision, third.Cached, names(third), moved)
	}
}

func TestAnOCISourcesFailuresAreToldApart(t *testing.T) {
	registry := testenv.StartRegistry(t)
	registry.PushFiles(t, "plumb/app", "v1", map[string]string{"a.yaml": configMap("a", "1")})
	account := oci.Auth{Username: registry.Username, Password: registry.Password}
	read := func(r *source.Reader, o source.OCIRequest) error {
		_, err := r.Read(context.Background(), source.Request{OCI: &o})
		return err
	}
	allowing, refusing := ociReader(t, &testenv.RegistryRequests{}, true), ociReader(t, &testenv.RegistryRequests{}, false)
	url := registry.URL("plumb/app")
	for _, tc := range []struct {
		name   string
		reader *source.Reader
		req    source.OCIRequest
		reason source.Reason
		is     error
	}{
		{"insecure, refused by the controller", refusing, source.OCIRequest{URL: url, Auth: account, Insecure: true}, source.ReasonInvalidSpec, source.ErrInsecureRegistry},
		{"a plain HTTP registry without insecure", allowing, source.OCIRequest{URL: url, Ref: oci.Ref{Tag: "v1"}, Auth: account}, source.ReasonSourceUnavailable, oci.ErrPlainHTTP},
		{"a wrong password", allowing, source.OCIRequest{URL: url, Ref: oci.Ref{Tag: "v1"}, Auth: oci.Auth{Username: registry.Username, Password: "not-the-password"}, Insecure: true}, source.ReasonSourceUnavailable, oci.ErrUnauthorized},
		{"a tag it lacks", allowing, source.OCIRequest{URL: url, Ref: oci.Ref{Tag: "v9"}, Auth: account, Insecure: true}, source.ReasonRevisionNotFound, oci.ErrNotFound},
		{"no tag in the semver range", allowing, source.OCIRequest{URL: url, Ref: oci.Ref{SemVer: ">=2"}, Auth: account, Insecure: true}, source.ReasonRevisionNotFound, oci.ErrNotFound},
		{"a layer type it lacks", allowing, source.OCIRequest{URL: url, Ref: oci.Ref{Tag: "v1"}, Auth: account, Insecure: true, LayerMediaType: "application/x-none"}, source.ReasonRevisionNotFound, oci.ErrNotFound},
		{"a URL with a tag", allowing, source.OCIRequest{URL: url + ":v1", Auth: account, Insecure: true}, source.ReasonInvalidSpec, oci.ErrInvalidRef},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := read(tc.reader, tc.req)
			if source.ReasonOf(err) != tc.reason || !errors.Is(err, tc.is) {
				t.Fatalf("got %v (%s), want %s wrapping %v", err, source.ReasonOf(err), tc.reason, tc.is)
			}
			if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), registry.Password) {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
}

// With verification asked, a revision is read only once a trusted key's
// signature of it is found; the check is remembered, so that an unchanged
// tick is still one manifest HEAD; an unsigned revision that the tag moves
// to is refused without downloading any of it.
func TestAVerifiedArtifactIsReadOnlyWhenSigned(t *testing.T) {
	registry := testenv.StartRegistry(t)
	key, stranger := testenv.GenerateCosignKey(t), testenv.GenerateCosignKey(t)
	signed := registry.PushFiles(t, "plumb/app", "v1", map[string]string{"a.yaml": configMap("a", "1")})
	requests := &testenv.RegistryRequests{}
	r := ociReader(t, requests, true)
	verify := &source.OCIVerify{Keys: map[string][]byte{"cosign.pub": key.Public}}
	req := source.Request{OCI: &source.OCIRequest{URL: registry.URL("plumb/app"), Ref: oci.Ref{Tag: "v1"},
		Auth: oci.Auth{Username: registry.Username, Password: registry.Password}, Insecure: true, Verify: verify}}
	ctx := context.Background()
	refused := func(t *testing.T, req source.Request, why string) {
		t.Helper()
		requests.Reset()
		got, err := r.Read(ctx, req)
		if source.ReasonOf(err) != source.ReasonVerificationFailed || !strings.Contains(err.Error(), why) {
			t.Fatalf("Read = %v, %v; want %s saying %q", got, err, source.ReasonVerificationFailed, why)
		}
		if n := requests.Reset(); n["GET blobs"] > 1 { // at most the signature's payload
			t.Errorf("a refused read made %v: the artifact's layer was downloaded", n)
		}
	}

	refused(t, req, "is not signed")
	// The tag's HEAD and the missing signature's manifest; the artifact's
	// manifest and layer were not asked for.
	requests.Reset()
	if _, err := r.Read(ctx, req); source.ReasonOf(err) != source.ReasonVerificationFailed {
		t.Fatalf("the unsigned artifact: %v", err)
	}
	if n, want := requests.Reset(), map[string]int{"HEAD manifests": 1, "GET manifests": 1}; !cmp.Equal(n, want) {
		t.Errorf("an unsigned read made %v, want %v: nothing of the artifact", n, want)
	}
	registry.Sign(t, key, "plumb/app", signed)
	first, err := r.Read(ctx, req)
	if err != nil {
		t.Fatalf("the signed artifact: %v", err)
	}
	if first.Verified == nil || first.Verified.Digest != signed || first.Verified.Key != "cosign.pub" || !cmp.Equal(names(first), []string{"ConfigMap/a"}) {
		t.Fatalf("read %+v with %v; want it verified by cosign.pub and ConfigMap/a", first.Verified, names(first))
	}
	requests.Reset()
	again, err := r.Read(ctx, req)
	if err != nil || again.Verified == nil || !again.Cached {
		t.Fatalf("the next read: %+v, %v; want a cached, verified read", again, err)
	}
	if n := requests.Reset(); !cmp.Equal(n, map[string]int{"HEAD manifests": 1}) {
		t.Errorf("an unchanged verified tick made %v, want one manifest HEAD", n)
	}

	t.Run("another key's Secret is not served the remembered check", func(t *testing.T) {
		other := *req.OCI
		other.Verify = &source.OCIVerify{Keys: map[string][]byte{"cosign.pub": stranger.Public}}
		refused(t, source.Request{OCI: &other}, "no key verifies it")
	})

	t.Run("keys that do not parse are named", func(t *testing.T) {
		other := *req.OCI
		other.Verify = &source.OCIVerify{Keys: map[string][]byte{"team.pub": []byte("-----BEGIN PUBLIC KEY-----\nbroken\n")}}
		refused(t, source.Request{OCI: &other}, "team.pub")
	})

	t.Run("a fresh read (a webhook, a sync request) verifies again", func(t *testing.T) {
		fresh := req
		fresh.Refresh = true
		requests.Reset()
		got, err := r.Read(ctx, fresh)
		if err != nil || got.Verified == nil || got.Verified.Digest != signed {
			t.Fatalf("a fresh read: %+v, %v; want it verified", got, err)
		}
		// The tag's HEAD; the signature's manifest and payload; the
		// artifact's manifest and layer (a fresh read renders again too).
		want := map[string]int{"HEAD manifests": 1, "GET manifests": 2, "GET blobs": 2}
		if n := requests.Reset(); !cmp.Equal(n, want) {
			t.Errorf("a fresh read made %v, want %v: the signature read again", n, want)
		}
	})

	t.Run("an unsigned revision the tag moves to is refused", func(t *testing.T) {
		registry.PushFiles(t, "plumb/app", "v1", map[string]string{"a.yaml": configMap("evil", "1")})
		refused(t, req, "is not signed")
	})
}

// A refresh (a push webhook, plumb sync) lists a semver range's tags
// again, for an artifact and for a chart (whose tags carry build metadata
// after "_"); a plain read keeps the shared listing for its 30 seconds.
func TestARefreshListsTheTagsAgain(t *testing.T) {
	registry := testenv.StartRegistry(t)
	chart := func(version string) v1.Image {
		return testenv.HelmChartArtifact(t, testenv.Chart(t, "web", version, map[string]string{"templates/cm.yaml": configMap("web", version)}))
	}
	registry.PushFiles(t, "plumb/app", "1.0.0", map[string]string{"a.yaml": configMap("a", "1")})
	registry.Push(t, "plumb/charts/web", "1.0.0", chart("1.0.0"))
	r := ociReader(t, &testenv.RegistryRequests{}, true)
	account := oci.Auth{Username: registry.Username, Password: registry.Password}
	artifact := source.Request{OCI: &source.OCIRequest{URL: registry.URL("plumb/app"), Ref: oci.Ref{SemVer: "1.x"}, Auth: account, Insecure: true}}
	charted := source.Request{Path: "web", Render: render.Options{Helm: render.HelmOptions{ReleaseName: "web", Namespace: "default"}},
		OCI: &source.OCIRequest{URL: registry.URL("plumb/charts/web"), Ref: oci.Ref{SemVer: "1.x"}, Auth: account, Insecure: true,
			LayerMediaType: oci.MediaTypeHelmChart}}
	ctx := context.Background()
	read := func(what string, req source.Request, refresh bool, wantTag string) {
		t.Helper()
		req.Refresh = refresh
		res, err := r.Read(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Revision.Name != wantTag {
			t.Errorf("%s: read %s, want tag %s", what, res.Revision, wantTag)
		}
	}
	read("the artifact", artifact, false, "1.0.0")
	read("the chart", charted, false, "1.0.0")
	registry.PushFiles(t, "plumb/app", "1.1.0", map[string]string{"a.yaml": configMap("a", "2")})
	registry.Push(t, "plumb/charts/web", "1.1.0_build.1", chart("1.1.0+build.1"))
	read("the artifact within the listing's age", artifact, false, "1.0.0")
	read("the artifact refreshed", artifact, true, "1.1.0")
	read("the chart refreshed", charted, true, "1.1.0_build.1")
}
