package helmrepo_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/provenance"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// A provenance file written by Helm's own signer (`helm package --sign`)
// is downloaded beside its archive from a real HTTPS repository and
// verified as `helm verify` does: by the trusted key, in an armored or a
// binary keyring, and only for the archive whose digest it signs. Helm's
// own verifier agrees with each verdict.
func TestAProvenanceVerifiesOnlyTheSignedArchiveByATrustedKey(t *testing.T) {
	ctx := context.Background()
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true, Username: "ci", Password: "s3cret"})
	c := &helmrepo.Client{Transport: repo.Transport()}
	auth := helmrepo.Auth{Username: "ci", Password: "s3cret"}
	trusted, stranger := testenv.GeneratePGPKey(t, "release"), testenv.GeneratePGPKey(t, "stranger")
	digest := "sha256:" + repo.Publish(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: ConfigMap\n"})
	repo.Sign(t, "web-1.0.0.tgz", trusted)

	index, err := c.Index(ctx, repo.URL, auth, false)
	if err != nil {
		t.Fatal(err)
	}
	cv, err := index.Index.Resolve("web", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := c.Provenance(ctx, repo.URL, cv, auth)
	if err != nil {
		t.Fatalf("Provenance: %v", err)
	}
	name, err := helmrepo.ArchiveName(repo.URL, cv)
	if err != nil || name != "web-1.0.0.tgz" {
		t.Fatalf("ArchiveName = %q, %v; want web-1.0.0.tgz", name, err)
	}
	signed := helmrepo.Signed{Archive: name, Digest: digest, Chart: "web", Version: "1.0.0"}
	// helmVerifies is `helm verify --keyring`'s verdict on the archive as
	// the repository serves it now.
	helmVerifies := func(t *testing.T, key *testenv.PGPKey) bool {
		t.Helper()
		ring := filepath.Join(t.TempDir(), "pubring.gpg")
		if err := os.WriteFile(ring, key.PublicBinary, 0o600); err != nil {
			t.Fatal(err)
		}
		signatory, err := provenance.NewFromKeyring(ring, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = signatory.Verify(repo.Path("web-1.0.0.tgz"), repo.Path("web-1.0.0.tgz.prov"))
		return err == nil
	}

	t.Run("the trusted key verifies, named by its keyring, armored or binary", func(t *testing.T) {
		for _, ring := range []map[string][]byte{
			{"release.asc": trusted.Public},
			{"release.gpg": trusted.PublicBinary},
			{"a-stranger.asc": stranger.Public, "release.asc": trusted.Public},
			{"release.asc": append(append([]byte{}, stranger.Public...), trusted.Public...)}, // two keys in one file
		} {
			signer, err := helmrepo.VerifyProvenance(prov, signed, ring)
			if err != nil {
				t.Fatalf("VerifyProvenance with %d keyrings: %v", len(ring), err)
			}
			if !strings.HasPrefix(signer, "release.") {
				t.Errorf("signer %q, want the release keyring", signer)
			}
		}
		if !helmVerifies(t, trusted) {
			t.Error("helm verify refuses what plumb accepted")
		}
	})

	t.Run("another key does not", func(t *testing.T) {
		_, err := helmrepo.VerifyProvenance(prov, signed, map[string][]byte{"stranger.asc": stranger.Public})
		if !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "no trusted key signed it") {
			t.Errorf("VerifyProvenance = %v, want ErrNotVerified: no trusted key", err)
		}
		if helmVerifies(t, stranger) {
			t.Error("helm verify accepts what plumb refused")
		}
	})

	t.Run("a provenance does not vouch for another archive, chart or version", func(t *testing.T) {
		other := "sha256:" + strings.Repeat("0", 64)
		_, err := helmrepo.VerifyProvenance(prov, helmrepo.Signed{Archive: name, Digest: other, Chart: "web", Version: "1.0.0"}, map[string][]byte{"release.asc": trusted.Public})
		if !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "the archive read is "+other) {
			t.Errorf("another digest: %v, want ErrNotVerified naming it", err)
		}
		for _, other := range []helmrepo.Signed{{Archive: name, Digest: digest, Chart: "web", Version: "9.9.9"}, {Archive: name, Digest: digest, Chart: "api", Version: "1.0.0"}} {
			_, err := helmrepo.VerifyProvenance(prov, other, map[string][]byte{"release.asc": trusted.Public})
			if !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "it signs chart web 1.0.0, the index lists it as "+other.Chart+" "+other.Version) {
				t.Errorf("the signed archive listed as %s %s: %v, want ErrNotVerified", other.Chart, other.Version, err)
			}
		}
		_, err = helmrepo.VerifyProvenance(prov, helmrepo.Signed{Archive: "api-1.0.0.tgz", Digest: digest, Chart: "web", Version: "1.0.0"}, map[string][]byte{"release.asc": trusted.Public})
		if !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "no checksum of api-1.0.0.tgz") {
			t.Errorf("another file name: %v, want ErrNotVerified", err)
		}
		// The archive replaced behind a kept provenance: Helm refuses it too.
		repo.Replace(t, "web-1.0.0.tgz", testenv.Chart(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: Secret\n"}))
		if helmVerifies(t, trusted) {
			t.Error("helm verify accepts a replaced archive")
		}
	})

	t.Run("a changed signed text fails the signature", func(t *testing.T) {
		tampered := []byte(strings.Replace(string(prov), "web-1.0.0.tgz: sha256:", "web-1.0.0.tgz: sha256:0", 1))
		if string(tampered) == string(prov) {
			t.Fatal("the provenance names no checksum to change")
		}
		_, err := helmrepo.VerifyProvenance(tampered, signed, map[string][]byte{"release.asc": trusted.Public})
		if !errors.Is(err, helmrepo.ErrNotVerified) {
			t.Errorf("a tampered provenance: %v, want ErrNotVerified", err)
		}
		if _, err := helmrepo.VerifyProvenance([]byte("not signed"), signed, map[string][]byte{"release.asc": trusted.Public}); !errors.Is(err, helmrepo.ErrNotVerified) {
			t.Errorf("no clear-signed block: %v, want ErrNotVerified", err)
		}
	})

	t.Run("a keyring that does not parse is named, not a failed verification", func(t *testing.T) {
		_, err := helmrepo.VerifyProvenance(prov, signed, map[string][]byte{"broken.asc": []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\nnonsense\n")})
		if err == nil || errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "broken.asc") {
			t.Errorf("a broken keyring: %v, want an error naming it", err)
		}
	})

	t.Run("a version without provenance, and a huge one", func(t *testing.T) {
		repo.Publish(t, "web", "1.1.0", map[string]string{"templates/cm.yaml": "kind: ConfigMap\n"})
		index, err := c.Index(ctx, repo.URL, auth, true)
		if err != nil {
			t.Fatal(err)
		}
		unsigned, err := index.Index.Resolve("web", "1.1.0")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Provenance(ctx, repo.URL, unsigned, auth); !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "no provenance file") {
			t.Errorf("Provenance of an unsigned version = %v, want ErrNotVerified: no provenance file", err)
		}
		if err := os.WriteFile(repo.Path("web-1.1.0.tgz.prov"), make([]byte, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Provenance(ctx, repo.URL, unsigned, auth); !errors.Is(err, helmrepo.ErrLimitExceeded) {
			t.Errorf("Provenance of 2 MiB = %v, want ErrLimitExceeded", err)
		}
		if _, err := c.Provenance(ctx, repo.URL, unsigned, helmrepo.Auth{Username: "ci", Password: "wrong"}); !errors.Is(err, helmrepo.ErrUnauthorized) {
			t.Errorf("Provenance with a wrong password = %v, want ErrUnauthorized", err)
		}
	})

	t.Run("a bucket's 403 for a missing provenance is no provenance", func(t *testing.T) {
		bucket := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{TLS: true, ForbidMissing: true})
		bucket.Publish(t, "web", "1.0.0", map[string]string{"templates/cm.yaml": "kind: ConfigMap\n"})
		c := &helmrepo.Client{Transport: bucket.Transport()}
		index, err := c.Index(ctx, bucket.URL, helmrepo.Auth{}, false)
		if err != nil {
			t.Fatal(err)
		}
		cv, err := index.Index.Resolve("web", "1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Provenance(ctx, bucket.URL, cv, helmrepo.Auth{}); !errors.Is(err, helmrepo.ErrNotVerified) || !strings.Contains(err.Error(), "HTTP 403") {
			t.Errorf("Provenance answered 403 = %v, want ErrNotVerified: no provenance file (HTTP 403)", err)
		}
	})
}
