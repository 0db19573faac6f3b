package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var generous = oci.Limits{Tree: tree.Limits{MaxFiles: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 19}, MaxLayerBytes: 1 << 20}

func TestAnArtifactsContentLayerIsUnpacked(t *testing.T) {
	r := testenv.StartRegistry(t)
	files := map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "deploy/link.yaml": "-> cm.yaml"}
	r.Push(t, "plumb/app", "v1", testenv.Artifact(t, testenv.TarGz(t, files), oci.MediaTypeFluxContent))
	url := oci.Scheme + r.Host + "/plumb/app"
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	requests := &testenv.RegistryRequests{}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	ctx := context.Background()
	rev, err := c.Resolve(ctx, url, oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	requests.Reset()
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
	if n := requests.Reset(); n["GET manifests"] != 1 || n["GET blobs"] != 1 {
		t.Errorf("a pull made %v, want one manifest GET and one blob GET", n)
	}
	if _, err := c.Pull(ctx, url, rev, auth, "application/x-none", generous); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("a layer type the artifact lacks: %v, want ErrNotFound", err)
	}
}

func TestAnImageIndexYieldsItsFirstManifest(t *testing.T) {
	r := testenv.StartRegistry(t)
	files := map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"}
	index := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: testenv.Artifact(t, testenv.TarGz(t, files), oci.MediaTypeOCILayer)})
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
	bomb := testenv.TarGz(t, map[string]string{"big.yaml": strings.Repeat("\x00", 64<<20)})
	r.Push(t, "plumb/hostile", "bomb", testenv.Artifact(t, bomb, oci.MediaTypeFluxContent))
	padded := testenv.TarGzPadded(t, map[string]string{"ok.yaml": "x: 1\n"}, 64<<20) // files within the limits
	r.Push(t, "plumb/hostile", "padded", testenv.Artifact(t, padded, oci.MediaTypeFluxContent))
	many := map[string]string{}
	for i := range 200 {
		many[strings.Repeat("d", i%7+1)+"/"+strings.Repeat("f", i+1)+".yaml"] = "x"
	}
	r.Push(t, "plumb/hostile", "many", testenv.Artifact(t, testenv.TarGz(t, many), oci.MediaTypeFluxContent))
	r.Push(t, "plumb/hostile", "escape", testenv.Artifact(t, testenv.TarGz(t, map[string]string{"../../etc/passwd": "x"}), oci.MediaTypeFluxContent))
	r.Push(t, "plumb/hostile", "notgzip", testenv.Artifact(t, []byte("plain text"), oci.MediaTypeFluxContent))

	requests := &testenv.RegistryRequests{}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	pull := func(tag string, limits oci.Limits) error {
		rev, err := c.Resolve(context.Background(), url, oci.Ref{Tag: tag}, auth)
		if err != nil {
			t.Fatal(err)
		}
		requests.Reset()
		_, err = c.Pull(context.Background(), url, rev, auth, "", limits)
		return err
	}
	var limitErr *tree.LimitError
	if err := pull("bomb", generous); !errors.As(err, &limitErr) || limitErr.Limit != "file size" {
		t.Errorf("the bomb: %v, want the file size limit", err)
	}
	if err := pull("padded", generous); !errors.Is(err, oci.ErrLimitExceeded) || !strings.Contains(err.Error(), "decompresses to more") {
		t.Errorf("a bomb of skipped bytes: %v, want ErrLimitExceeded naming the decompression budget", err)
	}
	small := generous
	small.MaxLayerBytes = 1024
	if err := pull("bomb", small); !errors.Is(err, oci.ErrLimitExceeded) {
		t.Errorf("a layer larger than allowed: %v, want ErrLimitExceeded", err)
	}
	if n := requests.Reset(); n["GET blobs"] != 0 {
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
	// Entries the tree never sees (of a type it skips) still count: 8 MiB
	// of them stop at the layer's decompression budget.
	var skipped bytes.Buffer
	gz := gzip.NewWriter(&skipped)
	tw := tar.NewWriter(gz)
	for i := range 8 {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("skipped-%d", i), Typeflag: 'Z', Size: 1 << 20, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	r.Push(t, "plumb/hostile", "skipped", testenv.Artifact(t, skipped.Bytes(), oci.MediaTypeFluxContent))
	if err := pull("skipped", generous); !errors.Is(err, oci.ErrLimitExceeded) || !strings.Contains(err.Error(), "decompresses to more") {
		t.Errorf("8 MiB of skipped entries: %v, want the decompression budget's ErrLimitExceeded", err)
	}
}

// Content the registry altered (same size, other bytes) is refused: its
// digest is checked before Pull returns it.
func TestAlteredContentIsRefused(t *testing.T) {
	r := testenv.StartRegistry(t)
	content := testenv.TarGz(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	r.Push(t, "plumb/app", "v1", testenv.Artifact(t, content, oci.MediaTypeFluxContent))
	digest := sha256.Sum256(content)
	blob := filepath.Join(r.Storage, "docker/registry/v2/blobs/sha256", hex.EncodeToString(digest[:1]), hex.EncodeToString(digest[:]), "data")
	altered := testenv.TarGz(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
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
