package webhook

import (
	"strings"
	"testing"
)

func TestNormalizeURLMatchesSpellingsOfOneRepository(t *testing.T) {
	const want = "github.com/org/repo"
	for _, raw := range []string{
		"https://github.com/org/repo",
		"https://github.com/org/repo.git",
		"https://github.com/org/repo/",
		"https://github.com/org/repo.git/",
		"https://GitHub.COM/org/repo",
		"https://github.com:443/org/repo",
		"http://github.com/org/repo",
		"https://user:token@github.com/org/repo.git",
		"ssh://git@github.com/org/repo.git",
		"ssh://git@github.com:22/org/repo",
		"git@github.com:org/repo.git",
		"git@GITHUB.com:org/repo",
		"git://github.com/org/repo.git",
		"  https://github.com/org/repo  ",
	} {
		got, err := NormalizeURL(raw)
		if err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func TestNormalizeURLKeepsDifferentRepositoriesApart(t *testing.T) {
	base, _ := NormalizeURL("https://github.com/org/repo")
	for _, raw := range []string{
		"https://github.com/org/repo2",
		"https://github.com/other/repo",
		"https://gitlab.com/org/repo",
		"https://github.com:8443/org/repo",
		"ssh://git@github.com:2222/org/repo",
		"https://github.com/org/repo/sub",
		"https://github.com/Org/Repo", // paths are compared as written
	} {
		got, err := NormalizeURL(raw)
		if err != nil {
			t.Errorf("NormalizeURL(%q): %v", raw, err)
			continue
		}
		if got == base {
			t.Errorf("NormalizeURL(%q) = %q matches %q", raw, got, base)
		}
	}
}

func TestNormalizeURLRejectsWhatIsNotARepositoryURL(t *testing.T) {
	for _, raw := range []string{"", "ftp://host/repo", "https://github.com", "https:///repo", "just-text", "git@:repo", "host:/"} {
		if got, err := NormalizeURL(raw); err == nil {
			t.Errorf("NormalizeURL(%q) = %q, want an error", raw, got)
		}
	}
}

func FuzzNormalizeURL(f *testing.F) {
	for _, seed := range []string{"https://github.com/org/repo.git", "git@github.com:org/repo", "ssh://git@h:22/a", "@:", "a@b@c:d", "https://[::1]:443/x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := NormalizeURL(raw)
		if err != nil {
			return
		}
		if strings.HasSuffix(got, "/") || strings.HasSuffix(got, ".git") || strings.Contains(got, "@") && !strings.Contains(raw, "@") {
			t.Fatalf("NormalizeURL(%q) = %q is not canonical", raw, got)
		}
		host, _, _ := strings.Cut(got, "/")
		if strings.Contains(strings.TrimPrefix(host[strings.LastIndex(host, "]")+1:], "]"), ":") {
			return // an explicit port only means something with its scheme
		}
		if again, err := NormalizeURL("https://" + got); err != nil || again != got {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", raw, got, again, err)
		}
	})
}
