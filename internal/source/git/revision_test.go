package git

import "testing"

// A revision reads back as String wrote it, and its short form keeps the
// name and cuts the commit to ShortHashLength digits.
func TestARevisionReadsBackAndShortens(t *testing.T) {
	hash := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		rev   Revision
		short string
	}{
		{Revision{Name: "main", Hash: hash}, "main@sha1:0123456"},
		{Revision{Name: "v1.2.0", Hash: hash}, "v1.2.0@sha1:0123456"},
		{Revision{Hash: hash}, "sha1:0123456"},
		{Revision{Name: "a working copy"}, "a working copy"},
		{Revision{Name: "main", Hash: "abc"}, "main@sha1:abc"},
	} {
		if got := ParseRevision(tc.rev.String()); got != tc.rev {
			t.Errorf("ParseRevision(%q) = %+v, want %+v", tc.rev.String(), got, tc.rev)
		}
		if got := tc.rev.Short(); got != tc.short {
			t.Errorf("%+v.Short() = %q, want %q", tc.rev, got, tc.short)
		}
	}
}
