package oci

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Cosign's classic signature format, which `cosign sign` (v2) writes: an
// image tagged sha256-<hex of the signed digest>.sig in the signed
// artifact's repository, each of whose layers is a simple-signing payload
// naming the signed digest, with its signature in an annotation.
const (
	// MediaTypeCosignSignature is a cosign signature layer.
	MediaTypeCosignSignature = "application/vnd.dev.cosign.simplesigning.v1+json"
	// cosignSignatureAnnotation holds a layer's base64 signature.
	cosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
	// maxSignatureLayers bounds the signatures considered of one digest
	// (every `cosign sign` of it adds one).
	maxSignatureLayers = 32
	// maxPayloadBytes bounds one payload (cosign's are a few hundred bytes).
	maxPayloadBytes = 64 << 10
	// maxPublicKeys bounds the keys of one verification.
	maxPublicKeys = 32
)

// ErrNotVerified is an artifact without a signature that the keys verify.
var ErrNotVerified = errors.New("no valid signature")

// PublicKey is a named public key (a cosign.pub) that verifies signatures.
type PublicKey struct {
	// Name is where the key came from (a key of a Secret).
	Name     string
	verifier signature.Verifier
}

// ParsePublicKeys parses PEM public keys (ECDSA, RSA or Ed25519, as
// `cosign generate-key-pair` and `cosign public-key` write them), named by
// the keys of pems, in the order of their names. A key that does not parse
// is an error naming it.
func ParsePublicKeys(pems map[string][]byte) ([]PublicKey, error) {
	if len(pems) == 0 {
		return nil, errors.New("no public key")
	}
	if len(pems) > maxPublicKeys {
		return nil, fmt.Errorf("%d public keys, more than %d", len(pems), maxPublicKeys)
	}
	names := make([]string, 0, len(pems))
	for n := range pems {
		names = append(names, n)
	}
	sort.Strings(names)
	keys := make([]PublicKey, 0, len(names))
	for _, n := range names {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(pems[n])
		if err != nil {
			return nil, fmt.Errorf("public key %s: %v", n, err)
		}
		v, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %v", n, err)
		}
		keys = append(keys, PublicKey{Name: n, verifier: v})
	}
	return keys, nil
}

// Verification is a signature found valid.
type Verification struct {
	// Digest is the manifest digest that was signed.
	Digest string
	// Key is the name of the key that verified it.
	Key string
}

// VerifyCosign looks for a cosign signature of rev's manifest digest in the
// repository at url (the tag sha256-<hex>.sig) that one of keys verifies
// and that names that digest. It downloads the signature's manifest and
// its payloads (each bounded), never the artifact. The transparency log is
// not consulted: a key, not an identity, is what is trusted. ErrNotVerified
// says why no signature passed.
func (c *Client) VerifyCosign(ctx context.Context, url string, rev Revision, auth Auth, keys []PublicKey) (Verification, error) {
	if len(keys) == 0 {
		return Verification{}, fmt.Errorf("%w: no public key to verify %s with", ErrNotVerified, rev.Digest)
	}
	repo, err := c.repository(url)
	if err != nil {
		return Verification{}, err
	}
	digest, err := v1.NewHash(rev.Digest)
	if err != nil || digest.Algorithm != "sha256" {
		return Verification{}, fmt.Errorf("%w: digest %q", ErrInvalidRef, rev.Digest)
	}
	sess, err := c.session(repo, auth)
	if err != nil {
		return Verification{}, err
	}
	sigTag := repo.Tag("sha256-" + digest.Hex + ".sig")
	desc, err := sess.puller.Get(ctx, sigTag)
	if err != nil {
		if errors.Is(classify(err, ""), ErrNotFound) {
			return Verification{}, fmt.Errorf("%w: %s in %s is not signed (no %s)", ErrNotVerified, rev.Digest, url, sigTag.TagStr())
		}
		return Verification{}, classify(err, sigTag.TagStr()+" in "+url)
	}
	manifest, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return Verification{}, fmt.Errorf("%w: the signature manifest %s in %s: %v", ErrNotVerified, sigTag.TagStr(), url, err)
	}
	var why []string
	var unreadable error // the first payload the registry failed to serve
	considered := 0
	for i, layer := range manifest.Layers {
		if string(layer.MediaType) != MediaTypeCosignSignature {
			continue
		}
		if considered++; considered > maxSignatureLayers {
			why = append(why, fmt.Sprintf("more than %d signatures; the rest were not read", maxSignatureLayers))
			break
		}
		if layer.Digest.Algorithm != "sha256" || len(layer.Digest.Hex) != 64 {
			why = append(why, fmt.Sprintf("layer %d: no sha256 digest", i))
			continue
		}
		key, err := c.checkSignature(ctx, sess, repo, layer, rev.Digest, keys)
		if err == nil {
			return Verification{Digest: rev.Digest, Key: key}, nil
		}
		if ctx.Err() != nil {
			return Verification{}, ctx.Err()
		}
		var transient *registryError
		if errors.As(err, &transient) {
			// Another signature may still verify; if none does, this
			// is the registry's failure, not a verdict on the artifact.
			if unreadable == nil {
				unreadable = transient.err
			}
			continue
		}
		why = append(why, fmt.Sprintf("%s: %v", layer.Digest.Hex[:12], err))
	}
	if unreadable != nil {
		return Verification{}, fmt.Errorf("reading a signature payload of %s: %w", sigTag.TagStr(), unreadable)
	}
	if considered == 0 {
		return Verification{}, fmt.Errorf("%w: %s in %s holds no cosign signature layer", ErrNotVerified, sigTag.TagStr(), url)
	}
	return Verification{}, fmt.Errorf("%w for %s in %s, of %d signatures: %s", ErrNotVerified, rev.Digest, url, considered, strings.Join(why, "; "))
}

// registryError is a failure to read a signature from the registry (as
// opposed to a signature that does not verify): it says nothing of the
// artifact, and is reported as the registry's.
type registryError struct{ err error }

func (e *registryError) Error() string { return e.err.Error() }

// checkSignature downloads one signature layer's payload (its digest
// checked), verifies its signature with each key and then that the payload
// names digest. It returns the name of the key that verified it.
func (c *Client) checkSignature(ctx context.Context, sess *session, repo name.Repository, layer v1.Descriptor, digest string, keys []PublicKey) (string, error) {
	encoded, ok := layer.Annotations[cosignSignatureAnnotation]
	if !ok {
		return "", errors.New("no signature annotation")
	}
	sig, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return "", fmt.Errorf("the signature is not base64: %v", err)
	}
	if layer.Size > maxPayloadBytes {
		return "", fmt.Errorf("%w: a payload of %d bytes, more than %d", ErrLimitExceeded, layer.Size, maxPayloadBytes)
	}
	blob, err := sess.puller.Layer(ctx, repo.Digest(layer.Digest.String()))
	if err != nil {
		return "", &registryError{classify(err, layer.Digest.String()+" in "+repo.Name())}
	}
	rc, err := blob.Compressed() // its digest is checked as it ends
	if err != nil {
		return "", &registryError{classify(err, layer.Digest.String()+" in "+repo.Name())}
	}
	defer rc.Close()
	body, err := io.ReadAll(&exactly{r: rc, left: layer.Size})
	if err != nil {
		return "", fmt.Errorf("reading the payload: %v", err)
	}
	key := ""
	for _, k := range keys {
		if k.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) == nil {
			key = k.Name
			break
		}
	}
	if key == "" {
		return "", errors.New("no key verifies it")
	}
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(body, &p); err != nil {
		return "", fmt.Errorf("the payload is not a simple-signing document: %v", err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return "", fmt.Errorf("the payload's type is %q, not %q", p.Critical.Type, payload.CosignSignatureType)
	}
	if p.Critical.Image.DockerManifestDigest != digest {
		return "", fmt.Errorf("it signs %s, not %s", p.Critical.Image.DockerManifestDigest, digest)
	}
	return key, nil
}
