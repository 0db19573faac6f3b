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

// Push is what a push payload says, whatever the provider: for a Git
// host, the repository's URLs (clone URLs, SSH URLs, web URLs), the ref it
// moved (refs/heads/main, refs/tags/v1.2.0) and, where the provider lists
// them, the paths its commits changed; for a registry, the tags it
// pushed. It is a hint only: the tick reads the source itself.
type Push struct {
	URLs []string
	Ref  string
	// ChangedPaths is nil when the provider does not list them.
	ChangedPaths []string
	// Artifacts are the tags a registry pushed (then URLs and Ref are
	// empty).
	Artifacts []Artifact
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
	url        string // a canonical Git URL, or registryKey of an OCI repository
	ref        plumbv1.GitRef
	path       string
	pathFilter bool
	// constraint is ref.SemVer parsed once (nil: none, or it does not
	// parse, and then no tag is in it).
	constraint *semver.Constraints
	// chartTags reads registry tags as `helm push` writes versions,
	// build metadata after "_".
	chartTags bool
}

// helmChartLayer is a Helm chart's layer media type (oci.MediaTypeHelmChart,
// whose package this one may not import): an OCI App that selects it reads
// a chart.
const helmChartLayer = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// maxArtifacts bounds the tags of one push that are matched: a payload
// listing more (Quay's updated_tags, say) is matched by its first ones.
const maxArtifacts = 100

// registryKey keys an OCI repository apart from Git URLs in byURL.
func registryKey(canonical string) string { return "oci://" + canonical }

// NewIndex creates an empty index.
func NewIndex() *Index {
	return &Index{apps: map[types.NamespacedName]indexedApp{}, byURL: map[string]map[types.NamespacedName]bool{}}
}

// Set adds or updates an App.
func (ix *Index) Set(app *plumbv1.App) {
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name}
	entry, ok := indexEntry(app)
	if ok && entry.ref.SemVer != "" {
		entry.constraint, _ = semver.NewConstraint(entry.ref.SemVer)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.deleteLocked(key)
	if !ok {
		return // a source no push can name (file://, a digest, a bucket, say)
	}
	url := entry.url
	ix.apps[key] = entry
	if ix.byURL[url] == nil {
		ix.byURL[url] = map[types.NamespacedName]bool{}
	}
	ix.byURL[url][key] = true
}

// indexEntry is what a push must name to concern the App, if any can.
func indexEntry(app *plumbv1.App) (indexedApp, bool) {
	src := app.Spec.Source
	switch {
	case src.OCI != nil:
		repo, err := repourl.Registry(src.OCI.URL)
		if err != nil || src.OCI.Ref.Digest != "" {
			return indexedApp{}, false // a digest never moves
		}
		ref := plumbv1.GitRef{Tag: src.OCI.Ref.Tag, SemVer: src.OCI.Ref.SemVer}
		if ref.Tag == "" && ref.SemVer == "" {
			ref.Tag = "latest" // what the OCI source reads
		}
		chart := src.OCI.LayerSelector != nil && src.OCI.LayerSelector.MediaType == helmChartLayer
		return indexedApp{url: registryKey(repo), ref: ref, chartTags: chart}, true
	case src.Helm != nil:
		if !strings.HasPrefix(src.Helm.Repository, "oci://") {
			return indexedApp{}, false // an HTTP repository sends no push
		}
		repo, err := repourl.Registry(strings.TrimSuffix(src.Helm.Repository, "/") + "/" + src.Helm.Chart)
		if err != nil {
			return indexedApp{}, false
		}
		ref := plumbv1.GitRef{SemVer: src.Helm.Version}
		if _, err := semver.StrictNewVersion(src.Helm.Version); err == nil {
			ref = plumbv1.GitRef{Tag: strings.ReplaceAll(src.Helm.Version, "+", "_")} // its tag
		} else if src.Helm.Version == "" {
			ref.SemVer = "*"
		}
		return indexedApp{url: registryKey(repo), ref: ref, chartTags: true}, true
	case src.Bucket != nil:
		return indexedApp{}, false
	}
	g := src.GitRepository()
	url, err := repourl.Canonical(g.URL)
	if err != nil {
		return indexedApp{}, false
	}
	return indexedApp{url: url, ref: g.Ref, path: cleanPath(src.Path),
		pathFilter: app.Spec.Webhook != nil && app.Spec.Webhook.PathFilter}, true
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
	if len(p.Artifacts) > 0 {
		return ix.matchArtifacts(p.Artifacts)
	}
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
			if seen[key] || !app.refMatches(isBranch, branch, tag) {
				continue
			}
			if app.pathFilter && p.ChangedPaths != nil && !touches(p.ChangedPaths, app.path) {
				continue
			}
			seen[key] = true
		}
	}
	return sortedKeys(seen)
}

// matchArtifacts returns the Apps that read one of the pushed tags'
// repositories (in any spelling: repourl.Registry) and track that tag or
// a semver range containing it, sorted. Digest-pinned Apps never match.
func (ix *Index) matchArtifacts(artifacts []Artifact) []types.NamespacedName {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	seen := map[types.NamespacedName]bool{}
	if len(artifacts) > maxArtifacts {
		artifacts = artifacts[:maxArtifacts]
	}
	for _, a := range artifacts {
		repo, err := repourl.Registry(a.Repository)
		if err != nil {
			continue
		}
		for key := range ix.byURL[registryKey(repo)] {
			if app := ix.apps[key]; !seen[key] && app.artifactRefMatches(a.Tag) {
				seen[key] = true
			}
		}
	}
	return sortedKeys(seen)
}

// artifactRefMatches reports whether a pushed tag is the App's tag or a
// version in its range. A registry tag cannot hold "+", so a chart's
// build metadata is pushed after "_" (Helm's rule); a chart App's range
// reads it back as "+", as the OCI source's resolve does.
func (a indexedApp) artifactRefMatches(tag string) bool {
	if a.ref.SemVer != "" && a.chartTags {
		tag = strings.ReplaceAll(tag, "_", "+")
	}
	return a.refMatches(false, "", tag)
}

// sortedKeys lists a set of Apps in order.
func sortedKeys(set map[types.NamespacedName]bool) []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(set))
	for key := range set {
		out = append(out, key)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// refMatches reports whether a pushed branch or tag is what the App
// tracks: its branch, its tag, or a version in its semver range.
func (a indexedApp) refMatches(isBranch bool, branch, tag string) bool {
	ref := a.ref
	switch {
	case ref.Commit != "":
		return false
	case isBranch:
		return ref.Branch == branch
	case ref.Tag != "":
		return ref.Tag == tag
	case ref.SemVer != "":
		if a.constraint == nil {
			return false
		}
		v, err := semver.NewVersion(tag)
		return err == nil && a.constraint.Check(v)
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
