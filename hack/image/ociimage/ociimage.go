// Package ociimage assembles plumb's container image from a static binary,
// with no container engine: one layer on an empty base, a non-root numeric
// user, OCI media types and labels, and a fixed time on every file and in
// the config, so that the same binary always gives the same digest. Write
// stores it as a tarball that is an OCI image layout and a `docker save`
// archive at once (as Docker 25 writes them), so that `docker load`,
// `ctr import`, `podman load` and crane all read it.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the numeric user and group the image runs as (the distroless
// images' "nonroot"), so that a pod's runAsNonRoot can check it.
const User = "65532:65532"

// BinaryPath is where the binary lives in the image.
const BinaryPath = "/plumb"

// Spec describes the image to build.
type Spec struct {
	// Binary is the static Linux binary to put at BinaryPath.
	Binary []byte
	// Arch is its GOARCH (amd64, arm64).
	Arch string
	// Version and Commit go into the OCI labels.
	Version, Commit string
	// Source is the repository's URL, for the labels.
	Source string
	// Created is the time on every file and in the config: the commit's
	// time, so that two builds of one commit are equal.
	Created time.Time
}

// Build assembles the image.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Binary) == 0 {
		return nil, fmt.Errorf("no binary to put in the image")
	}
	layerTar, err := layerOf(spec.Binary, spec.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, Annotations: map[string]string{
		"org.opencontainers.image.title": BinaryPath, // what the layer holds
	}, History: v1.History{
		Created: v1.Time{Time: spec.Created}, CreatedBy: "plumb's make image: " + BinaryPath, Comment: "plumb " + spec.Version,
	}})
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "plumb",
		"org.opencontainers.image.description": "plumb, a GitOps controller that keeps a cluster equal to what Git says",
		"org.opencontainers.image.version":     spec.Version,
		"org.opencontainers.image.revision":    spec.Commit,
		"org.opencontainers.image.created":     spec.Created.UTC().Format(time.RFC3339),
	}
	if spec.Source != "" {
		labels["org.opencontainers.image.source"] = spec.Source
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = spec.Arch, "linux"
	cfg.Created = v1.Time{Time: spec.Created}
	cfg.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"controller"},
		WorkingDir: "/",
		Labels:     labels,
		// Go's os.TempDir and the Git cache's default live under /tmp,
		// which the chart mounts as an emptyDir.
		Env: []string{"TMPDIR=/tmp"},
	}
	return mutate.ConfigFile(img, cfg)
}

// layerOf is the layer's tar: /tmp (sticky, world-writable, for an
// emptyDir to mount on) and the binary, read-only and executable.
func layerOf(binary []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	headers := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777},
		{Typeflag: tar.TypeReg, Name: BinaryPath[1:], Mode: 0o555, Size: int64(len(binary))},
	}
	for _, h := range headers {
		h.ModTime, h.Format = created.UTC(), tar.FormatPAX
		h.Uid, h.Gid = 0, 0 // files belong to root; the user only reads and runs them
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := w.Write(binary); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write stores img, tagged ref (e.g. ghcr.io/plumb-dev/plumb:v0.1.0), as a
// tarball at path that is both an OCI image layout (oci-layout, index.json,
// blobs/sha256/…) and a `docker save` archive (manifest.json pointing at the
// same blobs). Every entry has a fixed time, so equal images give equal
// files. It returns the manifest's digest: the image's digest in the OCI
// layout, and in a registry the layout is pushed to.
func Write(path string, img v1.Image, ref string) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: want registry/repository:tag: %w", ref, err)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return v1.Hash{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, err
	}
	type blob struct {
		digest v1.Hash
		data   []byte
	}
	blobs := []blob{{configName, config}}
	layerPaths := []string{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return v1.Hash{}, err
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return v1.Hash{}, err
		}
		blobs = append(blobs, blob{d, data})
		layerPaths = append(layerPaths, blobPath(d))
	}
	blobs = append(blobs, blob{digest, manifest})

	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          ref, // the name `ctr import` gives it
				"org.opencontainers.image.ref.name": tag.TagStr(),
			},
		}},
	})
	if err != nil {
		return v1.Hash{}, err
	}
	dockerManifest, err := json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blobPath(configName), RepoTags: []string{ref}, Layers: layerPaths}})
	if err != nil {
		return v1.Hash{}, err
	}

	f, err := os.Create(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	cfg, _ := img.ConfigFile()
	mtime := cfg.Created.Time.UTC()
	w := tar.NewWriter(f)
	write := func(name string, data []byte) error {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := w.Write(data)
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return v1.Hash{}, err
		}
	}
	for _, b := range blobs {
		if err := write(blobPath(b.digest), b.data); err != nil {
			return v1.Hash{}, err
		}
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"manifest.json", dockerManifest},
	} {
		if err := write(e.name, e.data); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := w.Close(); err != nil {
		return v1.Hash{}, err
	}
	return digest, f.Close()
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
