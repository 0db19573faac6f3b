package oci_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// Artifacts signed by the real cosign verify with its public key, and only
// those: an unsigned artifact, a signature by another key, a signature of
// another artifact and a tampered payload are each refused with why.
func TestACosignSignatureVerifiesAndForgeriesDoNot(t *testing.T) {
	r := testenv.StartRegistry(t)
	signer, stranger := testenv.GenerateCosignKey(t), testenv.GenerateCosignKey(t)
	requests := &testenv.RegistryRequests{}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	url := r.URL("plumb/app")
	ctx := context.Background()
	keys := func(t *testing.T, pems map[string][]byte) []oci.PublicKey {
		t.Helper()
		k, err := oci.ParsePublicKeys(pems)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	trusted := keys(t, map[string][]byte{"cosign.pub": signer.Public})
	resolve := func(t *testing.T, tag string) oci.Revision {
		t.Helper()
		rev, err := c.Resolve(ctx, url, oci.Ref{Tag: tag}, auth)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	refused := func(t *testing.T, rev oci.Revision, keys []oci.PublicKey, why string) {
		t.Helper()
		_, err := c.VerifyCosign(ctx, url, rev, auth, keys)
		if !errors.Is(err, oci.ErrNotVerified) || !strings.Contains(err.Error(), why) {
			t.Errorf("VerifyCosign(%s) = %v, want %v saying %q", rev, err, oci.ErrNotVerified, why)
		}
	}

	signed := r.PushFiles(t, "plumb/app", "v1", map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	rev := resolve(t, "v1")
	refused(t, rev, trusted, "is not signed")
	r.Sign(t, signer, "plumb/app", signed)

	t.Run("its signer's key verifies it, downloading the payload and not the artifact", func(t *testing.T) {
		requests.Reset()
		got, err := c.VerifyCosign(ctx, url, rev, auth, trusted)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest != signed || got.Key != "cosign.pub" {
			t.Errorf("verification %+v, want the digest %s by cosign.pub", got, signed)
		}
		if n := requests.Reset(); n["GET manifests"] != 1 || n["GET blobs"] != 1 {
			t.Errorf("requests %v, want the signature's manifest and its one payload", n)
		}
		// Of several keys, the one that verifies is named.
		two := keys(t, map[string][]byte{"a-stranger.pub": stranger.Public, "b-signer.pub": signer.Public})
		if got, err := c.VerifyCosign(ctx, url, rev, auth, two); err != nil || got.Key != "b-signer.pub" {
			t.Errorf("with two keys: %+v, %v; want b-signer.pub", got, err)
		}
	})

	t.Run("another key does not", func(t *testing.T) {
		refused(t, rev, keys(t, map[string][]byte{"stranger.pub": stranger.Public}), "no key verifies it")
	})

	t.Run("a signature copied from another artifact does not", func(t *testing.T) {
		r.PushFiles(t, "plumb/app", "v2", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: evil}\n"})
		other := resolve(t, "v2")
		copySignature(t, r, "plumb/app", signed, "plumb/app", other.Digest, func(payload []byte) []byte { return payload })
		refused(t, other, trusted, "it signs "+signed)
	})

	t.Run("a tampered payload does not", func(t *testing.T) {
		r.PushFiles(t, "plumb/app", "v3", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: three}\n"})
		third := resolve(t, "v3")
		// The signature of v1 with its payload rewritten to name v3.
		copySignature(t, r, "plumb/app", signed, "plumb/app", third.Digest, func(payload []byte) []byte {
			return bytes.ReplaceAll(payload, []byte(signed), []byte(third.Digest))
		})
		refused(t, third, trusted, "no key verifies it")
	})

	t.Run("a payload over 64 KiB is not downloaded", func(t *testing.T) {
		r.PushFiles(t, "plumb/app", "v4", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: four}\n"})
		fourth := resolve(t, "v4")
		copySignature(t, r, "plumb/app", signed, "plumb/app", fourth.Digest, func(payload []byte) []byte {
			return append(payload, bytes.Repeat([]byte(" "), 64<<10)...)
		})
		requests.Reset()
		refused(t, fourth, trusted, "more than 65536")
		if n := requests.Reset(); n["GET blobs"] != 0 {
			t.Errorf("requests %v: the oversized payload was downloaded", n)
		}
	})

	t.Run("at most 32 signatures are read", func(t *testing.T) {
		r.PushFiles(t, "plumb/app", "v5", map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: five}\n"})
		fifth := resolve(t, "v5")
		copySignature(t, r, "plumb/app", signed, "plumb/app", fifth.Digest, func(payload []byte) []byte { return payload }, 40)
		requests.Reset()
		refused(t, fifth, trusted, "more than 32 signatures")
		if n := requests.Reset(); n["GET blobs"] != 32 {
			t.Errorf("requests %v, want 32 payloads read of the 40", n)
		}
	})

	t.Run("a signed digest copied to another repository verifies there", func(t *testing.T) {
		// As with cosign verify, the payload's docker-reference is not
		// compared with the URL: the key signs a digest, not a place.
		opt := remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})
		original, err := remote.Image(mustRef(t, r.Host+"/plumb/app@"+signed), opt)
		if err != nil {
			t.Fatal(err)
		}
		r.Push(t, "plumb/mirror", "v1", original)
		copySignature(t, r, "plumb/app", signed, "plumb/mirror", signed, func(payload []byte) []byte { return payload })
		mirror := r.URL("plumb/mirror")
		mirrored, err := c.Resolve(ctx, mirror, oci.Ref{Tag: "v1"}, auth)
		if err != nil || mirrored.Digest != signed {
			t.Fatalf("the mirror's v1: %v, %v; want %s", mirrored, err, signed)
		}
		if _, err := c.VerifyCosign(ctx, mirror, mirrored, auth, trusted); err != nil {
			t.Errorf("the mirrored digest: %v, want it verified", err)
		}
	})

	t.Run("a key that does not parse is named", func(t *testing.T) {
		_, err := oci.ParsePublicKeys(map[string][]byte{"good.pub": signer.Public, "broken.pub": []byte("not a key")})
		if err == nil || !strings.Contains(err.Error(), "broken.pub") {
			t.Errorf("ParsePublicKeys = %v, want an error naming broken.pub", err)
		}
	})
}

// mustRef parses a reference.
func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// copySignature writes, as the signature of digest to in toRepository, the
// signature layers of digest from in fromRepository with their payloads
// passed through edit and their signature annotations kept: a forger's
// signature image. With copies, each layer is written that many times
// (each copy's payload made distinct by trailing spaces).
func copySignature(t *testing.T, r *testenv.Registry, fromRepository, from, toRepository, to string, edit func([]byte) []byte, copies ...int) {
	t.Helper()
	opt := remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})
	tag := func(repository, digest string) name.Reference {
		return mustRef(t, r.Host+"/"+repository+":sha256-"+strings.TrimPrefix(digest, "sha256:")+".sig")
	}
	n := 1
	if len(copies) > 0 {
		n = copies[0]
	}
	original, err := remote.Image(tag(fromRepository, from), opt)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := original.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	forged := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for _, l := range manifest.Layers {
		layer, err := original.LayerByDigest(l.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		payload, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			edited := edit(payload)
			if n > 1 {
				edited = append(edited, bytes.Repeat([]byte(" "), i)...)
			}
			if forged, err = mutate.Append(forged, mutate.Addendum{
				Layer: static.NewLayer(edited, l.MediaType), Annotations: l.Annotations, MediaType: l.MediaType,
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := remote.Write(tag(toRepository, to), forged, opt); err != nil {
		t.Fatal(err)
	}
}
