package repourl

import (
	"strings"
	"testing"
)

func TestCanonicalMatchesSpellingsOfOneRepository(t *testing.T) {
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
		got, err := Canonical(raw)
		if err != nil || got != want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func TestCanonicalKeepsDifferentRepositoriesApart(t *testing.T) {
	base, _ := Canonical("https://github.com/org/repo")
	for _, raw := range []string{
		"https://github.com/org/repo2",
		"https://github.com/other/repo",
		"https://gitlab.com/org/repo",
		"https://github.com:8443/org/repo",
		"ssh://git@github.com:2222/org/repo",
		"https://github.com/org/repo/sub",
		"https://github.com/Org/Repo", // paths are compared as written
	} {
		got, err := Canonical(raw)
		if err != nil {
			t.Errorf("Canonical(%q): %v", raw, err)
			continue
		}
		if got == base {
			t.Errorf("Canonical(%q) = %q matches %q", raw, got, base)
		}
	}
}

func TestCanonicalRejectsWhatIsNotARepositoryURL(t *testing.T) {
	for _, raw := range []string{"", "ftp://host/repo", "https://github.com", "https:///repo", "just-text", "git@:repo", "host:/"} {
		if got, err := Canonical(raw); err == nil {
			t.Errorf("Canonical(%q) = %q, want an error", raw, got)
		}
	}
}

// A URL that does not parse is refused without its password: the error
// may reach a log.
func TestCanonicalsErrorShowsNoPassword(t *testing.T) {
	for _, raw := range []string{"https://user:pa/ss-s3cret@example.com/repo", "https://user:s3cret@exa mple.com/repo",
		"https://user:s3cret@host", "https://user:s3cret@ho_st/repo", "https://user:123/s3cret@host"} {
		if _, err := Canonical(raw); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Canonical(%q): %v, want an error without the password", raw, err)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{"https://github.com/org/repo.git", "git@github.com:org/repo", "ssh://git@h:22/a", "@:", "a@b@c:d", "https://[::1]:443/x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Canonical(raw)
		if err != nil {
			return
		}
		if strings.HasSuffix(got, "/") || strings.HasSuffix(got, ".git") || strings.Contains(got, "@") && !strings.Contains(raw, "@") {
			t.Fatalf("Canonical(%q) = %q is not canonical", raw, got)
		}
		host, _, _ := strings.Cut(got, "/")
		if strings.Contains(strings.TrimPrefix(host[strings.LastIndex(host, "]")+1:], "]"), ":") {
			return // an explicit port only means something with its scheme
		}
		if again, err := Canonical("https://" + got); err != nil || again != got {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", raw, got, again, err)
		}
	})
}

// OwnerPath finds owner/name in each spelling of a repository URL, and
// refuses one that names no repository.
func TestOwnerPathOfEachSpelling(t *testing.T) {
	for raw, want := range map[string]string{
		"https://github.com/org/repo.git":         "org/repo",
		"ssh://git@gitlab.com/group/sub/repo":     "group/sub/repo",
		"git@github.com:org/repo.git":             "org/repo",
		"https://gitea.example/org/repo/":         "org/repo",
		"https://github.com/org":                  "",
		"https://github.com/org/../../etc/passwd": "",
	} {
		got, err := OwnerPath(raw)
		if (want == "") != (err != nil) || got != want {
			t.Errorf("OwnerPath(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

// WithoutCredentials drops a URL's user and password, and masks all that
// may be one in a URL that does not parse.
func TestWithoutCredentialsShowsNoPassword(t *testing.T) {
	for raw, want := range map[string]string{
		"https://user:s3cret@github.com/org/repo": "https://github.com/org/repo",
		"https://github.com/org/repo":             "https://github.com/org/repo",
		"git@github.com:org/repo":                 "git@github.com:org/repo",
		"https://user:s3cret@host/%zz":            "https://***@host/%zz",
		"https://user:pa/ss@word@host/repo":       "https://***@host/repo",
		"https://host/%zz":                        "https://host/%zz",
		"https://user:123/s3cret@host/repo":       "https://***@host/repo",
		"https://user:123#s3cret@host/repo":       "https://***@host/repo",
		"ssh://git@host/org/repo":                 "ssh://host/org/repo",
	} {
		if got := WithoutCredentials(raw); got != want {
			t.Errorf("WithoutCredentials(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestRegistryMatchesSpellingsOfOneRepository(t *testing.T) {
	for want, spellings := range map[string][]string{
		"ghcr.io/org/charts/web": {"oci://ghcr.io/org/charts/web", "ghcr.io/org/charts/web", "GHCR.io/Org/Charts/Web",
			"ghcr.io/org/charts/web:1.2.3", "oci://ghcr.io/org/charts/web/", "ghcr.io/org/charts/web@sha256:" + strings.Repeat("a", 64)},
		"index.docker.io/library/nginx": {"nginx", "docker.io/nginx", "docker.io/library/nginx:latest", "oci://index.docker.io/library/nginx"},
		"index.docker.io/team/app":      {"team/app", "docker.io/team/app", "registry-1.docker.io/team/app"},
		"localhost:5000/e2e/web":        {"oci://localhost:5000/e2e/web", "localhost:5000/e2e/web:stable"},
	} {
		for _, raw := range spellings {
			if got, err := Registry(raw); err != nil || got != want {
				t.Errorf("Registry(%q) = %q, %v; want %q", raw, got, err, want)
			}
		}
	}
	for _, bad := range []string{"", "oci://", "https://ghcr.io/org/web", "ghcr.io/org/web:bad tag", "ghcr.io//web"} {
		if got, err := Registry(bad); err == nil {
			t.Errorf("Registry(%q) = %q, want an error", bad, got)
		}
	}
}
