package helmrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"sigs.k8s.io/yaml"
)

// ErrNotVerified is a chart whose provenance no trusted key signed, or
// whose provenance does not vouch for the archive read.
var ErrNotVerified = errors.New("the chart's provenance is not verified")

// maxProvenanceBytes bounds a provenance file (`helm package --sign`
// writes a few KiB).
const maxProvenanceBytes = 1 << 20

// Provenance downloads the provenance file of cv's archive (its URL with
// .prov appended, as `helm package --sign` writes it beside the archive),
// with the same rules as the archive's download.
func (c *Client) Provenance(ctx context.Context, repoURL string, cv ChartVersion, auth Auth) ([]byte, error) {
	archiveURL, err := ArchiveURL(repoURL, cv)
	if err != nil {
		return nil, err
	}
	resp, err := c.get(ctx, repoURL, archiveURL+".prov", auth, "the provenance of version "+cv.Version)
	// Storage behind a repository (S3, GCS) answers 403 for a file it
	// does not have, where a web server answers 404.
	if answered(err, http.StatusNotFound, http.StatusForbidden) {
		var status *statusError
		errors.As(err, &status)
		why := "no provenance file"
		if status.code == http.StatusForbidden {
			why = "no provenance file that the account may read (missing, or forbidden to it)"
		}
		return nil, fmt.Errorf("%w: version %s has %s (%s.prov: HTTP %d)", ErrNotVerified, cv.Version, why, redactURL(archiveURL), status.code)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxProvenanceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("downloading the provenance of version %s: %w", cv.Version, err)
	}
	if len(data) > maxProvenanceBytes {
		return nil, fmt.Errorf("%w: the provenance of version %s is larger than %d bytes", ErrLimitExceeded, cv.Version, maxProvenanceBytes)
	}
	return data, nil
}

// ArchiveName is the file name a provenance names cv's archive by: the
// last segment of its URL.
func ArchiveName(repoURL string, cv ChartVersion) (string, error) {
	archiveURL, err := ArchiveURL(repoURL, cv)
	if err != nil {
		return "", err
	}
	name := path.Base(strings.SplitN(archiveURL, "?", 2)[0])
	return name, nil
}

// Signed is what a provenance must vouch for: the archive read (its file
// name, as the index's URL ends, and its digest, "sha256:<hex>") and the
// chart and version the index says it is.
type Signed struct {
	Archive, Digest, Chart, Version string
}

// VerifyProvenance checks a provenance file as `helm verify` does: its
// clear-signed block is signed by a key of one of the keyrings (by name;
// armored or binary OpenPGP public keys), and the checksums it signs give
// the archive's name its digest. Unlike helm verify, it also holds the
// chart's name and version that the signed metadata gives to what the
// index says, so that an index cannot list a signed archive under another
// version. It returns the name of the keyring whose key signed. A keyring
// that does not parse is an error of its own, not ErrNotVerified, naming
// it.
func VerifyProvenance(prov []byte, want Signed, keyrings map[string][]byte) (string, error) {
	block, _ := clearsign.Decode(prov)
	if block == nil {
		return "", fmt.Errorf("%w: the provenance holds no clear-signed block", ErrNotVerified)
	}
	names := make([]string, 0, len(keyrings))
	for name := range keyrings {
		names = append(names, name)
	}
	sort.Strings(names)
	var all openpgp.EntityList
	holder := map[string]string{} // primary key fingerprint → the first keyring holding it
	for _, name := range names {
		ring, err := readKeyRing(keyrings[name])
		if err != nil {
			return "", fmt.Errorf("the keyring %s: %w", name, err)
		}
		for _, e := range ring {
			if _, ok := holder[string(e.PrimaryKey.Fingerprint)]; !ok {
				holder[string(e.PrimaryKey.Fingerprint)] = name
			}
		}
		all = append(all, ring...)
	}
	signer, err := openpgp.CheckDetachedSignature(all, bytes.NewReader(block.Bytes), block.ArmoredSignature.Body, nil)
	if err != nil {
		return "", fmt.Errorf("%w: no trusted key signed it (%v)", ErrNotVerified, err)
	}
	// The signed text is the chart's metadata, "...", then the checksums
	// (Helm's provenance reads the second part the same way).
	parts := bytes.Split(block.Plaintext, []byte("\n...\n"))
	if len(parts) < 2 {
		return "", fmt.Errorf("%w: the signed text holds no checksums", ErrNotVerified)
	}
	var sums struct {
		Files map[string]string `json:"files"`
	}
	if err := yaml.Unmarshal(parts[1], &sums); err != nil {
		return "", fmt.Errorf("%w: the signed checksums: %v", ErrNotVerified, err)
	}
	if got, ok := sums.Files[want.Archive]; !ok {
		return "", fmt.Errorf("%w: it signs no checksum of %s", ErrNotVerified, want.Archive)
	} else if got != want.Digest {
		return "", fmt.Errorf("%w: it signs %s for %s, the archive read is %s", ErrNotVerified, got, want.Archive, want.Digest)
	}
	var chart struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(parts[0], &chart); err != nil {
		return "", fmt.Errorf("%w: the signed chart metadata: %v", ErrNotVerified, err)
	}
	if chart.Name != want.Chart || chart.Version != want.Version {
		return "", fmt.Errorf("%w: it signs chart %s %s, the index lists it as %s %s", ErrNotVerified, chart.Name, chart.Version, want.Chart, want.Version)
	}
	return holder[string(signer.PrimaryKey.Fingerprint)], nil
}

// readKeyRing reads a binary OpenPGP keyring, or armored ones: every
// public key block of the file (`cat a.asc b.asc` holds two).
func readKeyRing(data []byte) (openpgp.EntityList, error) {
	if !bytes.Contains(data, []byte("-----BEGIN PGP")) {
		return openpgp.ReadKeyRing(bytes.NewReader(data))
	}
	// Each block is decoded on its own: the armor reader reads ahead.
	const begin = "-----BEGIN PGP "
	var ring openpgp.EntityList
	for rest := data; ; {
		i := bytes.Index(rest, []byte(begin))
		if i < 0 {
			break
		}
		rest = rest[i:]
		next := bytes.Index(rest[len(begin):], []byte(begin))
		chunk := rest
		if next >= 0 {
			chunk, rest = rest[:len(begin)+next], rest[len(begin)+next:]
		} else {
			rest = nil
		}
		block, err := armor.Decode(bytes.NewReader(chunk))
		if err != nil {
			return nil, err
		}
		if block.Type != openpgp.PublicKeyType {
			continue // a signature, say, kept beside the keys
		}
		keys, err := openpgp.ReadKeyRing(block.Body)
		if err != nil {
			return nil, err
		}
		ring = append(ring, keys...)
	}
	if len(ring) == 0 {
		return nil, fmt.Errorf("no %s in it", openpgp.PublicKeyType)
	}
	return ring, nil
}
