package ui

import (
	"net/url"
	"strings"
)

// knownHosts are Git hosts whose web pages show a commit at
// https://HOST/OWNER/REPO/commit/SHA.
var knownHosts = map[string]bool{"github.com": true, "gitlab.com": true, "codeberg.org": true}

// commitURL is the web page of the revision's commit, for a repository
// on a known host reached over https; "" for any other (an App's URL is
// whatever its author wrote: only a URL built here, with scheme https,
// is ever a link).
func commitURL(repository, revision string) string {
	_, hash, ok := strings.Cut(revision, "sha1:")
	if !ok || len(hash) != 40 {
		return ""
	}
	u, err := url.Parse(repository)
	if err != nil || u.Scheme != "https" || !knownHosts[strings.ToLower(u.Host)] || u.User != nil {
		return ""
	}
	path := strings.TrimSuffix(strings.Trim(u.Path, "/"), ".git")
	if strings.Count(path, "/") < 1 || strings.ContainsAny(path, "?#") {
		return ""
	}
	return (&url.URL{Scheme: "https", Host: strings.ToLower(u.Host), Path: "/" + path + "/commit/" + hash}).String()
}
