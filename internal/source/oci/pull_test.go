package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// tarGz packs files (path → content; a content of "-> target" is a
// symlink) as tar+gzip.
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for path, content := range files {
		h := &tar.Header{Name: path, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			h = &tar.Header{Name: path, Linkname: target, Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(content)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// artifact is an OCI artifact as `flux push artifact` makes one, with a
// signature-like layer before its content layer.
func artifact(t *testing.T, content []byte, mediaType string) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.cncf.flux.config.v1+json")
	img, err := mutate.AppendLayers(img,
		static.NewLayer([]byte(`{"critical":{}}`), "application/vnd.dev.cosign.simplesigning.v1+json"),
		static.NewLayer(content, types.MediaType(mediaType)))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func pushImage(t *testing.T, r *testenv.Registry, repo, tag string, img v1.Image) {
	t.Helper()
	ref, err := name.NewTag(r.Host + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})); err != nil {
		t.Fatal(err)
	}
}

var generous = oci.Limits{Tree: tree.Limits{MaxFiles: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 19}, MaxLayerBytes: 1 << 20}

func TestAnArtifactsContentLayerIsUnpacked(t *testing.T) {
	r := testenv.StartRegistry(t)
	files := map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "deploy/link.yaml": "-> cm.yaml"}
	pushImage(t, r, "plumb/app", "v1", artifact(t, tarGz(t, files), oci.MediaTypeFluxContent))
	url := oci.Scheme + r.Host + "/plumb/app"
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	requests := &counting{count: map[string]int{}}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	ctx := context.Background()
	rev, err := c.Resolve(ctx, url, oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	requests.reset()
	got, err := c.Pull(ctx, url, rev, auth, "", generous)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"deploy/cm.yaml", "deploy/link.yaml"} {
		data, err := got.ReadFile(path)
		if err != nil || string(data) != files["deploy/cm.yaml"] {
			t.Errorf("%s: %q, %v; want the ConfigMap", path, data, err)
		}
	}
	// The manifest, and the content layer alone: the signature is not downloaded.
	if n := requests.reset(); n["GET manifests"] != 1 || n["GET blobs"] != 1 {
		t.Errorf("a pull made %v, want one manifest GET and one blob GET", n)
	}
	if _, err := c.Pull(ctx, url, rev, auth, "application/x-none", generous); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("a layer type the artifact lacks: %v, want ErrNotFound", err)
	}
}

func TestAnImageIndexYieldsItsFirstManifest(t *testing.T) {
	r := testenv.StartRegistry(t)
	files := map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"}
	index := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: artifact(t, tarGz(t, files), oci.MediaTypeOCILayer)})
	ref, err := name.NewTag(r.Host + "/plumb/indexed:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, index, remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})); err != nil {
		t.Fatal(err)
	}
	c := &oci.Client{AllowHTTP: true}
	url, auth := oci.Scheme+r.Host+"/plumb/indexed", oci.Auth{Username: r.Username, Password: r.Password}
	rev, err := c.Resolve(context.Background(), url, oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Pull(context.Background(), url, rev, auth, "", generous)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := got.ReadFile("a.yaml"); err != nil || string(data) != files["a.yaml"] {
		t.Errorf("a.yaml: %q, %v", data, err)
	}
}

// A hostile artifact costs bounded work: a layer larger than allowed is
// not downloaded, and unpacking stops at the first file past the limits.
func TestAHostileArtifactIsRefusedWithinItsLimits(t *testing.T) {
	r := testenv.StartRegistry(t)
	url, auth := oci.Scheme+r.Host+"/plumb/hostile", oci.Auth{Username: r.Username, Password: r.Password}
	// A bomb: 64 MiB of zeros compress to a few dozen KiB.
	bomb := tarGz(t, map[string]string{"big.yaml": strings.Repeat("\x00", 64<<20)})
	pushImage(t, r, "plumb/hostile", "bomb", artifact(t, bomb, oci.MediaTypeFluxContent))
	many := map[string]string{}
	for i := range 200 {
		many[strings.Repeat("d", i%7+1)+"/"+strings.Repeat("f", i+1)+".yaml"] = "x"
	}
	pushImage(t, r, "plumb/hostile", "many", artifact(t, tarGz(t, many), oci.MediaTypeFluxContent))
	pushImage(t, r, "plumb/hostile", "escape", artifact(t, tarGz(t, map[string]string{"../../etc/passwd": "x"}), oci.MediaTypeFluxContent))
	pushImage(t, r, "plumb/hostile", "notgzip", artifact(t, []byte("plain text"), oci.MediaTypeFluxContent))

	requests := &counting{count: map[string]int{}}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	pull := func(tag string, limits oci.Limits) error {
		rev, err := c.Resolve(context.Background(), url, oci.Ref{Tag: tag}, auth)
		if err != nil {
			t.Fatal(err)
		}
		requests.reset()
		_, err = c.Pull(context.Background(), url, rev, auth, "", limits)
		return err
	}
	var limitErr *tree.LimitError
	if err := pull("bomb", generous); !errors.As(err, &limitErr) || limitErr.Limit != "file size" {
		t.Errorf("the bomb: %v, want the file size limit", err)
	}
	small := generous
	small.MaxLayerBytes = 1024
	if err := pull("bomb", small); !errors.Is(err, oci.ErrLimitExceeded) {
		t.Errorf("a layer larger than allowed: %v, want ErrLimitExceeded", err)
	}
	if n := requests.reset(); n["GET blobs"] != 0 {
		t.Errorf("a layer larger than allowed was downloaded: %v", n)
	}
	if err := pull("many", generous); !errors.As(err, &limitErr) || limitErr.Limit != "file count" {
		t.Errorf("200 files: %v, want the file count limit", err)
	}
	var pathErr *tree.PathError
	if err := pull("escape", generous); !errors.As(err, &pathErr) {
		t.Errorf("a path out of the tree: %v, want a PathError", err)
	}
	if err := pull("notgzip", generous); err == nil || !strings.Contains(err.Error(), "not gzip") {
		t.Errorf("a layer that is not gzip: %v", err)
	}
}

// Content the registry altered (same size, other bytes) is refused: its
// digest is checked before Pull returns it.
func TestAlteredContentIsRefused(t *testing.T) {
	r := testenv.StartRegistry(t)
	content := tarGz(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	pushImage(t, r, "plumb/app", "v1", artifact(t, content, oci.MediaTypeFluxContent))
	digest := sha256.Sum256(content)
	blob := filepath.Join(r.Storage, "docker/registry/v2/blobs/sha256", hex.EncodeToString(digest[:1]), hex.EncodeToString(digest[:]), "data")
	altered := tarGz(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	if len(altered) != len(content) {
		t.Fatalf("the altered layer is %d bytes, the original %d: alter it keeping the size", len(altered), len(content))
	}
	if err := os.WriteFile(blob, altered, 0o600); err != nil {
		t.Fatalf("altering the stored blob: %v", err)
	}
	c := &oci.Client{AllowHTTP: true}
	url, auth := oci.Scheme+r.Host+"/plumb/app", oci.Auth{Username: r.Username, Password: r.Password}
	rev, err := c.Resolve(context.Background(), url, oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Pull(context.Background(), url, rev, auth, "", generous); err == nil || !strings.Contains(err.Error(), "checksum") {
		data, _ := got.ReadFile("a.yaml")
		t.Errorf("the altered layer: %v (a.yaml %q), want a checksum error", err, data)
	}
}
