package source

import (
	"testing"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/oci"
)

// Two accounts whose fields join alike are two origins.
func TestOriginsTellApartAccountsThatJoinAlike(t *testing.T) {
	if partsDigest("a\x00b", "c") == partsDigest("a", "b\x00c") || partsDigest("ab") == partsDigest("a", "b") {
		t.Error("partsDigest gives two lists of parts one digest")
	}
	h1 := &HelmRequest{Repository: "https://charts.example.com", Chart: "web", Auth: helmrepo.Auth{Username: "team\x00a", Password: "pw"}}
	h2 := &HelmRequest{Repository: "https://charts.example.com", Chart: "web", Auth: helmrepo.Auth{Username: "team", Password: "a\x00pw"}}
	if helmOrigin(h1) == helmOrigin(h2) {
		t.Error("two Helm accounts share an origin")
	}
	o1 := &OCIRequest{URL: "oci://r.example.com/app", Auth: oci.Auth{Username: "u\x00x", Password: "p"}}
	o2 := &OCIRequest{URL: "oci://r.example.com/app", Auth: oci.Auth{Username: "u", Password: "x\x00p"}}
	if ociOrigin(o1) == ociOrigin(o2) {
		t.Error("two OCI accounts share an origin")
	}
}
