package ui

import "testing"

// TestCommitURL: only a URL the dashboard builds itself, https to a known
// Git host, becomes a link; whatever an App's author wrote does not.
func TestCommitURL(t *testing.T) {
	const rev = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct{ repository, revision, want string }{
		{"https://github.com/acme/shop.git", rev, "https://github.com/acme/shop/commit/0123456789abcdef0123456789abcdef01234567"},
		{"https://GitLab.com/group/sub/shop", rev, "https://gitlab.com/group/sub/shop/commit/0123456789abcdef0123456789abcdef01234567"},
		{"javascript:alert(1)//github.com/a/b", rev, ""},
		{"http://github.com/acme/shop", rev, ""},
		{"https://token@github.com/acme/shop", rev, ""},
		{"https://git.internal/acme/shop", rev, ""},
		{"https://github.com/acme", rev, ""},
		{"git@github.com:acme/shop.git", rev, ""},
		{"https://github.com/acme/shop", "main@sha1:short", ""},
	} {
		if got := commitURL(tc.repository, tc.revision); got != tc.want {
			t.Errorf("commitURL(%q) = %q, want %q", tc.repository, got, tc.want)
		}
	}
}
