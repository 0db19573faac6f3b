// Package revision is how plumb records what a read read: a name (a
// branch or a tag) and a content digest, as "<name>@<algorithm>:<hex>".
// A Git commit is "main@sha1:<40 hex>" and an OCI artifact
// "v1.2.0@sha256:<64 hex>", the forms Flux records.
package revision

import "strings"

// Digest algorithms of the revisions plumb records.
const (
	// SHA1 names a Git commit.
	SHA1 = "sha1"
	// SHA256 names an OCI manifest, or a digest of a listing.
	SHA256 = "sha256"
)

// ShortLength is how many hex digits of a digest plumb shows where it
// abbreviates one (Git's and GitHub's default).
const ShortLength = 7

// Revision is a recorded revision.
type Revision struct {
	// Name is the branch or tag read; empty for a pinned commit or digest.
	Name string
	// Digest is "<algorithm>:<hex>"; empty when the content has none (a
	// working copy).
	Digest string
}

// String is "<name>@<digest>", the digest alone for a pinned one, or the
// name alone when there is no digest.
func (r Revision) String() string {
	switch {
	case r.Digest == "":
		return r.Name
	case r.Name == "":
		return r.Digest
	}
	return r.Name + "@" + r.Digest
}

// Parse reads a revision as String writes it. A name cannot hold
// "@sha1:" or "@sha256:" (Git refs cannot hold a colon, OCI tags an "@"),
// so the first of them ends the name.
func Parse(s string) Revision {
	for _, algorithm := range []string{SHA1, SHA256} {
		if name, hex, ok := strings.Cut(s, "@"+algorithm+":"); ok {
			return Revision{Name: name, Digest: algorithm + ":" + hex}
		}
		if strings.HasPrefix(s, algorithm+":") {
			return Revision{Digest: s}
		}
	}
	return Revision{Name: s}
}

// Algorithm is the digest's algorithm ("sha1", "sha256"), or "".
func (r Revision) Algorithm() string {
	algorithm, _, _ := strings.Cut(r.Digest, ":")
	return algorithm
}

// Hex is the digest without its algorithm, or "".
func (r Revision) Hex() string {
	_, hex, _ := strings.Cut(r.Digest, ":")
	return hex
}

// Short is the revision with its digest cut to ShortLength digits
// ("main@sha1:1a2b3c4"), for messages and tables.
func (r Revision) Short() string {
	hex := r.Hex()
	if len(hex) <= ShortLength {
		return r.String()
	}
	return Revision{Name: r.Name, Digest: r.Algorithm() + ":" + hex[:ShortLength]}.String()
}
