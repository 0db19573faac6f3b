package webhook

import (
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/repourl"
)

// Push is what a push payload says, whatever the provider: the
// repository's URLs (clone URLs, SSH URLs, web URLs), the ref it moved
// (refs/heads/main, refs/tags/v1.2.0) and, where the provider lists them,
// the paths its commits changed. It is a hint only: the tick reads Git
// itself.
type Push struct {
	URLs []string
	Ref  string
	// ChangedPaths is nil when the provider does not list them.
	ChangedPaths []string
}

// Index maps repository URLs to the Apps that track them, kept up to date
// by the App informer's events (Set on add and update, Delete on delete), so
// that matching a push never lists Apps from the API server.
type Index struct {
	mu    sync.RWMutex
	apps  map[types.NamespacedName]indexedApp
	byURL map[string]map[types.NamespacedName]bool
}

type indexedApp struct {
	url        string
	ref        plumbv1.GitRef
	path       string
	pathFilter bool
}

// NewIndex creates an empty index.
func NewIndex() *Index {
	return &Index{apps: map[types.NamespacedName]indexedApp{}, byURL: map[string]map[types.NamespacedName]bool{}}
}

// Set adds or updates an App.
func (ix *Index) Set(app *plumbv1.App) {
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name}
	url, err := repourl.Canonical(app.Spec.Source.URL)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deleteLocked(key)
	if err != nil {
		return // an URL no push can name (file://, say)
	}
	ix.apps[key] = indexedApp{url: url, ref: app.Spec.Source.Ref, path: cleanPath(app.Spec.Source.Path),
		pathFilter: app.Spec.Webhook != nil && app.Spec.Webhook.PathFilter}
	if ix.byURL[url] == nil {
		ix.byURL[url] = map[types.NamespacedName]bool{}
	}
	ix.byURL[url][key] = true
}

// Delete removes an App.
func (ix *Index) Delete(key types.NamespacedName) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deleteLocked(key)
}

func (ix *Index) deleteLocked(key types.NamespacedName) {
	old, ok := ix.apps[key]
	if !ok {
		return
	}
	delete(ix.apps, key)
	delete(ix.byURL[old.url], key)
	if len(ix.byURL[old.url]) == 0 {
		delete(ix.byURL, old.url)
	}
}

// Match returns the Apps a push concerns, sorted: those tracking one of the
// push's repository URLs and, for a branch push, that branch; for a tag
// push, that tag or a semver range containing it. Commit-pinned Apps never
// match. Apps with the path filter on are skipped when the push lists its
// changed paths and none is under the App's path.
func (ix *Index) Match(p Push) []types.NamespacedName {
	branch, isBranch := strings.CutPrefix(p.Ref, "refs/heads/")
	tag, isTag := strings.CutPrefix(p.Ref, "refs/tags/")
	if !isBranch && !isTag {
		return []types.NamespacedName{}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	seen := map[types.NamespacedName]bool{}
	for _, raw := range p.URLs {
		url, err := repourl.Canonical(raw)
		if err != nil {
			continue
		}
		for key := range ix.byURL[url] {
			app := ix.apps[key]
			if seen[key] || !refMatches(app.ref, isBranch, branch, tag) {
				continue
			}
			if app.pathFilter && p.ChangedPaths != nil && !touches(p.ChangedPaths, app.path) {
				continue
			}
			seen[key] = true
		}
	}
	out := make([]types.NamespacedName, 0, len(seen))
	for key := range seen {
		out = append(out, key)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func refMatches(ref plumbv1.GitRef, isBranch bool, branch, tag string) bool {
	switch {
	case ref.Commit != "":
		return false
	case isBranch:
		return ref.Branch == branch
	case ref.Tag != "":
		return ref.Tag == tag
	case ref.SemVer != "":
		constraint, err := semver.NewConstraint(ref.SemVer)
		if err != nil {
			return false
		}
		v, err := semver.NewVersion(tag)
		return err == nil && constraint.Check(v)
	}
	return false
}

// touches reports whether any changed file lies under dir ("" is the root).
func touches(changed []string, dir string) bool {
	if dir == "" {
		return len(changed) > 0
	}
	for _, c := range changed {
		c = cleanPath(c)
		if c == dir || strings.HasPrefix(c, dir+"/") {
			return true
		}
	}
	return false
}

func cleanPath(p string) string {
	return strings.Trim(path.Clean("/"+p), "/")
}
