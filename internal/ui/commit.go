package ui

import (
	"net/url"
	"strings"

	"github.com/plumb-dev/plumb/internal/repourl"
	"github.com/plumb-dev/plumb/internal/source/git"
)

// knownHosts are Git hosts whose web pages show a commit at
// https://HOST/OWNER/REPO/commit/SHA.
var knownHosts = map[string]bool{"github.com": true, "gitlab.com": true, "codeberg.org": true}

// commitURL is the web page of the revision's commit, for a repository
// on a known host reached over https; "" for any other (an App's URL is
// whatever its author wrote: only a URL built here, with scheme https,
// is ever a link).
func commitURL(repository, revision string) string {
	hash := git.ParseRevision(revision).Hash
	if len(hash) != 40 {
		return ""
	}
	u, err := url.Parse(repository)
	if err != nil || u.Scheme != "https" || !knownHosts[strings.ToLower(u.Host)] || u.User != nil {
		return ""
	}
	path, err := repourl.OwnerPath(repository)
	if err != nil || strings.ContainsAny(path, "?#") {
		return ""
	}
	return (&url.URL{Scheme: "https", Host: strings.ToLower(u.Host), Path: "/" + path + "/commit/" + hash}).String()
}
