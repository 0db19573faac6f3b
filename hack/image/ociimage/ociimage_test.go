package ociimage_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/plumb-dev/plumb/hack/image/ociimage"
)

func TestBuildIsReproducibleAndFollowsItsSpec(t *testing.T) {
	spec := ociimage.Spec{Binary: []byte("#!binary"), Arch: "amd64", Version: "v1.2.3", Commit: "abc", Created: time.Unix(1700000000, 0)}
	digestOf := func(spec ociimage.Spec) v1.Hash {
		t.Helper()
		img, err := ociimage.Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Image(img); err != nil {
			t.Fatalf("the image is not consistent: %v", err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digestOf(spec)
	if again := digestOf(spec); again != first {
		t.Errorf("two builds of one spec: %s and %s", first, again)
	}
	later := spec
	later.Created = spec.Created.Add(time.Second)
	if digestOf(later) == first {
		t.Error("a build at another time gave the same digest: the time is not in the image")
	}
	other := spec
	other.Binary = []byte("#!other")
	if digestOf(other) == first {
		t.Error("another binary gave the same digest")
	}
	if _, err := ociimage.Build(ociimage.Spec{}); err == nil {
		t.Error("an image without a binary was built")
	}
	if _, err := ociimage.Write(filepath.Join(t.TempDir(), "x.tar"), nil, "not a reference:"); err == nil {
		t.Error("a bad reference was accepted")
	}
}

// TestMakeImage runs `make image` twice, as a user would, and reads the
// tarball as each loader does: as an OCI layout (ctr import, docker load
// 25+, crane push of the extracted folder) and as a `docker save` archive
// (older docker load, crane push of the file).
func TestMakeImage(t *testing.T) {
	dir := t.TempDir()
	build := func(name string) (path, ref, digest string) {
		t.Helper()
		path = filepath.Join(dir, name)
		cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_TAR="+path)
		cmd.Dir = "../../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make image: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`(?m)^image:\s+(\S+)\ndigest:\s+(sha256:[0-9a-f]{64})$`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("make image printed no reference and digest:\n%s", out)
		}
		return path, m[1], m[2]
	}
	first, ref, digest := build("first.tar")
	second, _, again := build("second.tar")
	if digest != again {
		t.Errorf("two builds of one commit: digests %s and %s", digest, again)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Error("two builds of one commit wrote different tarballs")
	}

	// As an OCI layout.
	layoutDir := filepath.Join(dir, "layout")
	untar(t, first, layoutDir)
	index, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatalf("the tarball is no OCI layout: %v", err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 || manifest.Manifests[0].Digest.String() != digest {
		t.Fatalf("index.json lists %+v, want the one printed digest %s", manifest.Manifests, digest)
	}
	if name := manifest.Manifests[0].Annotations["io.containerd.image.name"]; name != ref {
		t.Errorf("ctr import would name it %q, want %q", name, ref)
	}
	img, err := index.Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the OCI image is not consistent: %v", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	commit := gitOutput(t, "rev-parse", "HEAD")
	want := v1.Config{User: "65532:65532", Entrypoint: []string{"/plumb"}, Cmd: []string{"controller"}}
	got := v1.Config{User: cfg.Config.User, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if l := cfg.Config.Labels; l["org.opencontainers.image.revision"] != commit || !strings.HasPrefix(ref, "ghcr.io/plumb-dev/plumb:"+l["org.opencontainers.image.version"]) || l["org.opencontainers.image.version"] == "" {
		t.Errorf("labels %v, want the revision %s and the version of %s", l, commit, ref)
	}

	// As a `docker save` archive.
	saved, err := tarball.ImageFromPath(first, nil)
	if err != nil {
		t.Fatalf("the tarball is no docker save archive: %v", err)
	}
	if err := validate.Image(saved); err != nil {
		t.Fatalf("the docker save image is not consistent: %v", err)
	}
	ociConfig, _ := img.ConfigName()
	savedConfig, _ := saved.ConfigName()
	if ociConfig != savedConfig {
		t.Errorf("the two readings have configs %s and %s", ociConfig, savedConfig)
	}

	// The binary inside runs.
	binary := extract(t, img, "plumb")
	path := filepath.Join(dir, "plumb")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("plumb version from the image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), commit) {
		t.Errorf("plumb version printed %q, want the commit %s", out, commit)
	}
	// The image has no /etc/ssl: without the fallback roots compiled in,
	// no https:// server would verify.
	modules, err := exec.Command("go", "version", "-m", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, modules)
	}
	if !regexp.MustCompile(`(?m)^\s+dep\s+golang.org/x/crypto/x509roots/fallback\s`).Match(modules) {
		t.Errorf("the binary in the image lacks golang.org/x/crypto/x509roots/fallback, so it has no root certificates:\n%s", modules)
	}
}

func untar(t *testing.T, path, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf: %v\n%s", err, out)
	}
}

// extract reads one file from the image's filesystem.
func extract(t *testing.T, img v1.Image, name string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the image", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			if h.Mode&0o111 == 0 || h.Mode&0o222 != 0 {
				t.Errorf("%s has mode %o, want read-only and executable", name, h.Mode)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

func gitOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
