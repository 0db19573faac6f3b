package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"sort"
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
)

// FluxContentMediaType is the layer of `flux push artifact`.
const FluxContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

// TarGz packs files (path → content; a content of "-> target" is a
// symlink) as tar+gzip, in path order.
func TarGz(t testing.TB, files map[string]string) []byte {
	t.Helper()
	return TarGzPadded(t, files, 0)
}

// TarGzPadded is TarGz with, after the files, an entry of a type that
// readers skip (a contiguous file, '7') whose body is padding zero bytes:
// a decompression bomb whose files are within any limit.
func TarGzPadded(t testing.TB, files map[string]string, padding int) []byte {
	t.Helper()
	paths := make([]string, 0, len(files))
	for path := range files {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, path := range paths {
		content := files[path]
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
	if padding > 0 {
		if err := tw.WriteHeader(&tar.Header{Name: "padding", Mode: 0o644, Size: int64(padding), Typeflag: tar.TypeCont}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, padding)); err != nil {
			t.Fatal(err)
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

// Artifact is an OCI artifact as `flux push artifact` makes one, with a
// signature-like layer before its content layer (of mediaType).
func Artifact(t testing.TB, content []byte, mediaType string) v1.Image {
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

// Push writes img to repository:tag as the registry's account and
// returns its manifest digest (sha256:…).
func (r *Registry) Push(t testing.TB, repository, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.NewTag(r.Host + "/" + repository + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return digest.String()
}

// PushFiles pushes files as a Flux artifact to repository:tag and returns
// its manifest digest.
func (r *Registry) PushFiles(t testing.TB, repository, tag string, files map[string]string) string {
	t.Helper()
	return r.Push(t, repository, tag, Artifact(t, TarGz(t, files), FluxContentMediaType))
}

// HelmChartMediaType is the layer of `helm push`.
const HelmChartMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// HelmChartArtifact is a chart archive as `helm push` stores it: Helm's
// config media type and one chart layer.
func HelmChartArtifact(t testing.TB, archive []byte) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.cncf.helm.config.v1+json")
	img, err := mutate.AppendLayers(img, static.NewLayer(archive, HelmChartMediaType))
	if err != nil {
		t.Fatal(err)
	}
	return img
}
