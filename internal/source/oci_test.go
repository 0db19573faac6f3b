package source_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/oci"
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
