package revision_test

import (
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/revision"
)

func TestARevisionReadsBackAsWritten(t *testing.T) {
	commit := strings.Repeat("a1", 20)
	manifest := strings.Repeat("b2", 32)
	for _, tc := range []struct {
		text       string
		want       revision.Revision
		short, hex string
	}{
		{"main@sha1:" + commit, revision.Revision{Name: "main", Digest: "sha1:" + commit}, "main@sha1:a1a1a1a", commit},
		{"sha1:" + commit, revision.Revision{Digest: "sha1:" + commit}, "sha1:a1a1a1a", commit},
		{"v1.2.0@sha256:" + manifest, revision.Revision{Name: "v1.2.0", Digest: "sha256:" + manifest}, "v1.2.0@sha256:b2b2b2b", manifest},
		{"sha256:" + manifest, revision.Revision{Digest: "sha256:" + manifest}, "sha256:b2b2b2b", manifest},
		{"user@host-branch@sha1:" + commit, revision.Revision{Name: "user@host-branch", Digest: "sha1:" + commit}, "user@host-branch@sha1:a1a1a1a", commit},
		{"working-copy", revision.Revision{Name: "working-copy"}, "working-copy", ""},
	} {
		got := revision.Parse(tc.text)
		if got != tc.want {
			t.Errorf("Parse(%q) = %#v, want %#v", tc.text, got, tc.want)
		}
		if got.String() != tc.text {
			t.Errorf("Parse(%q).String() = %q", tc.text, got.String())
		}
		if got.Short() != tc.short || got.Hex() != tc.hex {
			t.Errorf("Parse(%q): Short %q, Hex %q; want %q, %q", tc.text, got.Short(), got.Hex(), tc.short, tc.hex)
		}
	}
	if a := revision.Parse("main@sha1:" + commit).Algorithm(); a != revision.SHA1 {
		t.Errorf("algorithm %q", a)
	}
}
