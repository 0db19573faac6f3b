// Package source is the Read phase of a tick: given an App's source (URL,
// ref, path, render options) and credentials, it returns the revision it
// read and the rendered objects, or an Error whose Reason says what an
// operator should look at. It knows nothing about the cluster.
//
// A read costs one round trip to the Git server when the ref has not moved
// since an earlier read of the same path and options: the rendered objects
// come from a cache keyed by (commit, path, render options), so nothing is
// fetched and nothing is rendered twice.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	pathpkg "path"
	"strings"

	"k8s.io/utils/lru"

	"github.com/plumb-dev/plumb/source/git"
	"github.com/plumb-dev/plumb/source/manifest"
	"github.com/plumb-dev/plumb/source/render"
	"github.com/plumb-dev/plumb/source/tree"
)

// Limits bound what one read may load and produce. Zero means no limit.
type Limits struct {
	// MaxFiles bounds the files in the repository at the revision.
	MaxFiles int
	// MaxTotalBytes bounds the sum of the sizes of those files.
	MaxTotalBytes int64
	// MaxFileBytes bounds a single file.
	MaxFileBytes int64
	// MaxObjects bounds the rendered objects.
	MaxObjects int
}

// DefaultLimits are generous for a GitOps repository and small enough that a
// hostile one cannot exhaust the controller.
func DefaultLimits() Limits {
	return Limits{
		MaxFiles:      20_000,
		MaxTotalBytes: 128 << 20,
		MaxFileBytes:  8 << 20,
		MaxObjects:    10_000,
	}
}

// Request is what the tick asks the Read phase for.
type Request struct {
	// URL, Ref and Path name the folder to render at a revision.
	URL  string
	Ref  git.Ref
	Path string
	// Auth are the credentials from the App's secretRef (see AuthFromSecret).
	Auth git.Auth
	// Render holds the Helm options.
	Render render.Options
	// LastRevision is the revision the App last read successfully; when the
	// same branch now points to a commit that does not descend from it, the
	// result reports HistoryRewritten.
	LastRevision string
	// Refresh skips the render cache (a webhook asked for a fresh read).
	Refresh bool
}

// Result is what a read found. Objects are shared with the cache: treat them
// as read-only and DeepCopy before changing one.
type Result struct {
	// Revision is what was read, e.g. main@sha1:<40 hex>.
	Revision git.Revision
	// Engine is how the folder was rendered.
	Engine render.Engine
	// Objects are the rendered objects in a stable order.
	Objects []manifest.Object
	// Cached is true when the ref had not moved and the render came from the
	// cache: one round trip, no fetch, no render.
	Cached bool
	// HistoryRewritten is true when LastRevision's commit is not an ancestor
	// of the new one on the same branch (a force-push).
	HistoryRewritten bool
}

// Empty reports a render with no objects. It is not an error here, but prune
// must refuse to act on it unless the App allows it.
func (r *Result) Empty() bool { return len(r.Objects) == 0 }

// renderCacheSize bounds the renders kept: a few per App is plenty.
const renderCacheSize = 1024

// Reader reads sources. It is safe for concurrent use by every tick.
type Reader struct {
	repos   *git.Cache
	limits  Limits
	renders *lru.Cache // render key → *cachedRender
}

type cachedRender struct {
	engine  render.Engine
	objects []manifest.Object
}

// NewReader keeps repositories under cacheDir and enforces limits.
func NewReader(cacheDir string, limits Limits) (*Reader, error) {
	repos, err := git.NewCache(cacheDir)
	if err != nil {
		return nil, err
	}
	return &Reader{repos: repos, limits: limits, renders: lru.New(renderCacheSize)}, nil
}

// Read resolves the ref (one round trip), and unless the render is cached,
// fetches what the ref needs and renders the folder.
func (r *Reader) Read(ctx context.Context, req Request) (*Result, error) {
	rev, err := r.repos.Resolve(ctx, req.URL, req.Ref, req.Auth)
	if err != nil {
		return nil, classify("", err)
	}
	key, err := renderKey(rev.Hash, req.Path, req.Render)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidSpec, Revision: rev.String(), Err: err}
	}
	result := &Result{Revision: rev}
	if cached, ok := r.renders.Get(key); ok && !req.Refresh {
		c := cached.(*cachedRender)
		result.Engine, result.Objects, result.Cached = c.engine, c.objects, true
		return result, nil
	}

	if err := r.repos.Fetch(ctx, req.URL, req.Ref, rev, req.Auth); err != nil {
		return nil, classify(rev.String(), err)
	}
	result.HistoryRewritten = r.historyRewritten(req, rev)
	t, err := r.repos.Tree(req.URL, rev.Hash, tree.Limits{
		MaxFiles: r.limits.MaxFiles, MaxTotalBytes: r.limits.MaxTotalBytes, MaxFileBytes: r.limits.MaxFileBytes,
	})
	if err != nil {
		return nil, classify(rev.String(), err)
	}
	engine, objects, err := render.Render(t, req.Path, req.Render)
	if err != nil {
		return nil, classify(rev.String(), redactSecrets(err, t))
	}
	if max := r.limits.MaxObjects; max > 0 && len(objects) > max {
		return nil, &Error{Reason: ReasonLimitExceeded, Revision: rev.String(),
			Err: &tree.LimitError{Limit: "rendered object count", Max: int64(max), Got: int64(len(objects)), Path: displayPath(req.Path)}}
	}
	if err := manifest.Duplicates(objects); err != nil {
		return nil, &Error{Reason: ReasonInvalidManifest, Revision: rev.String(), Err: err}
	}
	r.renders.Add(key, &cachedRender{engine: engine, objects: objects})
	result.Engine, result.Objects = engine, objects
	return result, nil
}

// historyRewritten compares the new commit of a branch with the last one read.
func (r *Reader) historyRewritten(req Request, rev git.Revision) bool {
	if req.Ref.Branch == "" || req.LastRevision == "" {
		return false
	}
	name, lastHash, ok := strings.Cut(req.LastRevision, "@sha1:")
	if !ok || name != rev.Name || lastHash == rev.Hash {
		return false
	}
	isAncestor, err := r.repos.IsAncestor(req.URL, lastHash, rev.Hash)
	return err == nil && !isAncestor
}

// renderKey identifies a render: the commit, the folder and the options.
func renderKey(hash, dir string, opts render.Options) (string, error) {
	encoded, err := json.Marshal(opts)
	if err != nil {
		return "", fmt.Errorf("encoding the render options: %w", err)
	}
	sum := sha256.Sum256(encoded)
	return hash + "\x00" + strings.Trim(pathpkg.Clean("/"+dir), "/") + "\x00" + hex.EncodeToString(sum[:]), nil
}

func displayPath(p string) string {
	if strings.Trim(p, "/.") == "" {
		return "the repository root"
	}
	return p
}
