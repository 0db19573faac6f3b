package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"helm.sh/helm/v3/pkg/provenance"
)

// PGPKey is an OpenPGP key that signs charts as `helm package --sign`
// does, for tests of provenance verification.
type PGPKey struct {
	entity *openpgp.Entity
	// Public is the armored public keyring that verifies it (what a
	// verification Secret holds, `gpg --export --armor`).
	Public []byte
	// PublicBinary is the same keyring unarmored (`gpg --export`), the
	// form `helm verify --keyring` reads.
	PublicBinary []byte
}

// GeneratePGPKey makes a new signing key.
func GeneratePGPKey(t testing.TB, name string) *PGPKey {
	t.Helper()
	entity, err := openpgp.NewEntity(name, "plumb test", name+"@plumb.test", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := entity.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var binary bytes.Buffer
	if err := entity.Serialize(&binary); err != nil {
		t.Fatal(err)
	}
	return &PGPKey{entity: entity, Public: buf.Bytes(), PublicBinary: binary.Bytes()}
}

// Sign writes the provenance file of an archive of the repository
// (file.prov beside it) with Helm's own signer.
func (r *HelmRepository) Sign(t testing.TB, file string, key *PGPKey) {
	t.Helper()
	archive := filepath.Join(r.dir, "charts", file)
	prov, err := (&provenance.Signatory{Entity: key.entity}).ClearSign(archive)
	if err != nil {
		t.Fatalf("signing %s: %v", file, err)
	}
	if err := os.WriteFile(archive+".prov", []byte(prov), 0o644); err != nil {
		t.Fatal(err)
	}
}
