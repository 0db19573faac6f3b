package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

// Content media types of the layers Pull takes, in the order it prefers
// them. Any other layer — provenance, attestations, signatures, an SBOM —
// is ignored.
const (
	// MediaTypeFluxContent is Flux's `flux push artifact` layer.
	MediaTypeFluxContent = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// MediaTypeHelmChart is a Helm chart pushed with `helm push`.
	MediaTypeHelmChart = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	// MediaTypeOCILayer is a plain OCI tar+gzip layer.
	MediaTypeOCILayer = "application/vnd.oci.image.layer.v1.tar+gzip"
	// MediaTypeDockerLayer is a Docker image's tar+gzip layer.
	MediaTypeDockerLayer = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

var contentTypes = []string{MediaTypeFluxContent, MediaTypeHelmChart, MediaTypeOCILayer, MediaTypeDockerLayer}

// maxManifestBytes bounds a manifest or an index (go-containerregistry's
// own bound is 100 MiB): real ones are a few KiB.
const maxManifestBytes = 4 << 20

// ErrLimitExceeded is an artifact larger than the limits allow.
var ErrLimitExceeded = errors.New("limit exceeded")

// Limits bound what Pull downloads and unpacks.
type Limits struct {
	// Tree bounds the files unpacked (their count, each one's size, their
	// sum): a decompression bomb stops at the first file past them.
	Tree tree.Limits
	// MaxLayerBytes bounds the compressed layer, checked against its
	// manifest before any of it is downloaded.
	MaxLayerBytes int64
}

// Pull downloads the artifact of rev (resolved by Resolve) from the
// repository at url and unpacks its content layer into a tree. An image
// index yields its first manifest. The layer is the first of
// contentTypes, or, with layerMediaType set, the first of that type.
func (c *Client) Pull(ctx context.Context, url string, rev Revision, auth Auth, layerMediaType string, limits Limits) (*tree.Tree, error) {
	repo, err := c.repository(url)
	if err != nil {
		return nil, err
	}
	sess, err := c.session(repo, auth)
	if err != nil {
		return nil, err
	}
	ref, err := name.NewDigest(repo.String()+"@"+rev.Digest, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("%w: digest %q: %v", ErrInvalidRef, rev.Digest, err)
	}
	desc, err := sess.puller.Get(ctx, ref)
	if err != nil {
		return nil, classify(err, ref.Identifier()+" in "+url)
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		index, err := desc.ImageIndex()
		if err != nil {
			return nil, classify(err, ref.Identifier()+" in "+url)
		}
		manifest, err := index.IndexManifest()
		if err != nil {
			return nil, classify(err, ref.Identifier()+" in "+url)
		}
		if len(manifest.Manifests) == 0 {
			return nil, fmt.Errorf("%w: the index %s in %s lists no manifest", ErrNotFound, rev.Digest, url)
		}
		if img, err = index.Image(manifest.Manifests[0].Digest); err != nil {
			return nil, classify(err, manifest.Manifests[0].Digest.String()+" in "+url)
		}
	} else if img, err = desc.Image(); err != nil {
		return nil, classify(err, ref.Identifier()+" in "+url)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, classify(err, ref.Identifier()+" in "+url)
	}
	layer, err := contentLayer(manifest, layerMediaType)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", rev, url, err)
	}
	if limits.MaxLayerBytes > 0 && layer.Size > limits.MaxLayerBytes {
		return nil, fmt.Errorf("%w: the layer of %s in %s is %d bytes, more than %d", ErrLimitExceeded, rev, url, layer.Size, limits.MaxLayerBytes)
	}
	blob, err := sess.puller.Layer(ctx, repo.Digest(layer.Digest.String()))
	if err != nil {
		return nil, classify(err, layer.Digest.String()+" in "+url)
	}
	compressed, err := blob.Compressed() // verified against its digest as it is read
	if err != nil {
		return nil, classify(err, layer.Digest.String()+" in "+url)
	}
	defer compressed.Close()
	body := &exactly{r: compressed, left: layer.Size}
	t, err := unpack(body, limits.Tree)
	if err != nil {
		return nil, fmt.Errorf("unpacking %s of %s: %w", layer.Digest, rev, err)
	}
	// The digest is checked as the stream ends: read it to its end (at
	// most the layer's size), so that content the registry altered is
	// refused rather than applied.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, fmt.Errorf("reading %s of %s: %w", layer.Digest, rev, err)
	}
	return t, nil
}

// contentLayer picks the layer to unpack.
func contentLayer(m *v1.Manifest, mediaType string) (v1.Descriptor, error) {
	wanted := contentTypes
	if mediaType != "" {
		wanted = []string{mediaType}
	}
	for _, want := range wanted {
		for _, l := range m.Layers {
			if string(l.MediaType) == want {
				return l, nil
			}
		}
	}
	seen := make([]string, 0, len(m.Layers))
	for _, l := range m.Layers {
		seen = append(seen, string(l.MediaType))
	}
	return v1.Descriptor{}, fmt.Errorf("%w: no layer of type %s (the artifact has %s)", ErrNotFound, strings.Join(wanted, " or "), strings.Join(seen, ", "))
}

// unpack reads the layer's tar+gzip stream into a tree within limits
// (see tree.FromTarGzip); past the decompression budget it fails with
// ErrLimitExceeded.
func unpack(r io.Reader, limits tree.Limits) (*tree.Tree, error) {
	t, err := tree.FromTarGzip(r, limits)
	if errors.Is(err, tree.ErrDecompressionBudget) {
		return nil, fmt.Errorf("%w: the layer decompresses to more than its files may hold", ErrLimitExceeded)
	}
	return t, err
}

// exactly reads a blob of a known size: no byte past it, and at its end
// one more read of the stream, which must end there — that read is where
// go-containerregistry checks the digest.
type exactly struct {
	r    io.Reader
	left int64
}

func (e *exactly) Read(p []byte) (int, error) {
	if e.left <= 0 {
		var one [1]byte
		n, err := e.r.Read(one[:])
		switch {
		case n > 0:
			return 0, fmt.Errorf("%w: the layer is longer than its manifest says", ErrLimitExceeded)
		case err == nil:
			return 0, io.ErrNoProgress
		}
		return 0, err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("the layer ended %d bytes short of its manifest's size", e.left)
	}
	return n, err
}
