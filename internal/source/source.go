// Package source is the Read phase of a tick: given an App's source (URL,
// ref, path, render options) and credentials, it returns the revision it
// read and the rendered objects, or an Error whose Reason says what an
// operator should look at. It knows nothing about the cluster.
//
// A read costs one round trip to the Git server when the ref has not moved
// since an earlier read of the same path and options (and none within a
// short window after another read of the same repository with the same
// credentials): the rendered objects come from a cache keyed by (repository
// and credentials, commit, path, render options), so nothing is fetched and
// nothing is rendered twice, and no request sees a render that another
// request's credentials fetched.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	pathpkg "path"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/utils/lru"

	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
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
	// MaxFetchBytes bounds the pack one fetch may download over HTTP(S)
	// (0: git.DefaultTransferLimits'); it is not part of a tree's limits.
	MaxFetchBytes int64
}

// Validate refuses limits no read could keep: a negative bound, or no
// room to fetch (the errors name the flags that set them).
func (l Limits) Validate() error {
	if l.MaxFiles < 0 || l.MaxTotalBytes < 0 || l.MaxFileBytes < 0 || l.MaxObjects < 0 || l.MaxFetchBytes < 1 {
		return errors.New("--max-repository-files, --max-repository-bytes, --max-file-bytes and --max-objects must not be negative, --max-fetch-bytes must be positive")
	}
	return nil
}

// DefaultLimits are generous for a GitOps repository and small enough that a
// hostile one cannot exhaust the controller.
func DefaultLimits() Limits {
	return Limits{
		MaxFiles:      20_000,
		MaxTotalBytes: 128 << 20,
		MaxFileBytes:  8 << 20,
		MaxObjects:    10_000,
		MaxFetchBytes: git.DefaultTransferLimits().MaxFetchBytes,
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
	// FreshSince, with Refresh, is how old a listing of a registry's tags
	// may be and still serve: one that started at or after it (another
	// App's, woken by the same push) is fresh. Zero: the read's own start.
	// It is by this process's clock.
	FreshSince time.Time
	// Cluster, when set, tells Helm renders what the target cluster serves
	// (.Capabilities). It is asked only when the folder is a Helm chart.
	Cluster Capabilities
	// OCI, when set, reads an artifact from an OCI registry in place of a
	// Git repository: URL, Ref, Auth and LastRevision are then not used.
	OCI *OCIRequest
	// Helm, when set, reads a chart from an HTTP Helm repository in place
	// of a Git repository: URL, Ref, Auth and LastRevision are then not
	// used, and Path is set to the chart's folder in its archive (its
	// name); Render's values files are paths in the archive.
	Helm *HelmRequest
	// Bucket, when set, reads the objects under a prefix of an
	// S3-compatible bucket in place of a Git repository: URL, Ref, Auth
	// and LastRevision are then not used.
	Bucket *BucketRequest
	// ChartRepositories are the accounts of the repositories that a
	// chart's dependencies come from. A dependency from the Helm source's
	// own repository uses its account when none is given here.
	ChartRepositories []ChartRepository

	// dependencies are a chart's remote dependencies as resolved for this
	// read, by dependencyKey: the render uses these, the versions that
	// its cache key names.
	dependencies map[string]resolvedDependency
}

// Capabilities tells what the target cluster serves: its Kubernetes
// version and API versions ("group/version" and "group/version/Kind").
type Capabilities interface {
	Capabilities(ctx context.Context) (kubeVersion string, apiVersions []string, err error)
}

// Result is what a read found. Objects are shared with the cache (they are
// immutable; Decode gives a copy to change).
type Result struct {
	// Revision is what was read, e.g. main@sha1:<40 hex> or
	// v1.0.0@sha256:<64 hex>.
	Revision revision.Revision
	// CommitTime is the revision's committer date; zero when it could not
	// be read.
	CommitTime time.Time
	// Engine is how the folder was rendered.
	Engine render.Engine
	// Objects are the rendered objects in a stable order.
	Objects []*Object
	// LeftOut are objects the render gave that are not to be applied
	// (Helm's test hooks), with why.
	LeftOut []render.LeftOut
	// Cached is true when the ref had not moved and the render came from the
	// cache: one round trip, no fetch, no render.
	Cached bool
	// HistoryRewritten is true when LastRevision's commit is not an ancestor
	// of the new one on the same branch (a force-push).
	HistoryRewritten bool
	// Verified is the signature check that the revision passed; nil when
	// the request asked for none.
	Verified *oci.Verification
}

// Empty reports a render with no objects. It is not an error here, but prune
// must refuse to act on it unless the App allows it.
func (r *Result) Empty() bool { return len(r.Objects) == 0 }

// Options configure a Reader. Zero values take the defaults.
type Options struct {
	// CacheDir holds the Git repositories (see package git).
	CacheDir string
	// Limits bound what one read may load and produce.
	Limits Limits
	// RenderCacheBytes bounds the memory that cached renders take, by an
	// estimate of their size (default 256 MiB).
	RenderCacheBytes int64
	// RefsTTL is how long an ls-remote answer is shared by the reads of
	// one repository with the same credentials (default
	// git.DefaultRefsTTL; negative: never shared).
	RefsTTL time.Duration
	// RenderTimeout bounds one render (default 30s).
	RenderTimeout time.Duration
	// Isolation, when set, runs Kustomize and Helm builds in a child
	// process (see render.Isolation); its timeout is RenderTimeout.
	Isolation *render.Isolation
	// RegistryTransport carries the requests to OCI registries, Helm
	// repositories and S3 buckets (http.DefaultTransport when nil).
	RegistryTransport http.RoundTripper
	// AllowInsecureRegistries lets an App read a registry, a Helm
	// repository or a bucket over plain HTTP (oci.insecure, an http://
	// Helm repository, bucket.insecure); without it such an App fails
	// with InvalidSpec.
	AllowInsecureRegistries bool
	// HelmIndexMaxAge is how long a Helm repository's index is reused
	// before one conditional GET checks it again (default
	// helmrepo.DefaultIndexMaxAge).
	HelmIndexMaxAge time.Duration
	// Now is the clock of the shared tag listings' and indexes' ages
	// (time.Now when nil), for tests and benchmarks that model time.
	Now func() time.Time
}

// DefaultRenderCacheBytes is the default bound of the render cache.
const DefaultRenderCacheBytes = 256 << 20

// DefaultRenderTimeout is the default bound of one render.
const DefaultRenderTimeout = 30 * time.Second

// Reader reads sources. It is safe for concurrent use by every tick.
type Reader struct {
	repos      *git.Cache
	registries *oci.Client // HTTPS only
	// insecureRegistries allows plain HTTP; nil unless the Options allow it.
	insecureRegistries *oci.Client
	helmRepos          *helmrepo.Client // HTTPS only
	// insecureHelmRepos allows plain HTTP; nil unless the Options allow it.
	insecureHelmRepos *helmrepo.Client
	buckets           *bucket.Client // HTTPS only
	// insecureBuckets allows plain HTTP; nil unless the Options allow it.
	insecureBuckets *bucket.Client
	archiveDigests  *lru.Cache // Helm origin, index digest and version → archive digest
	limits          Limits
	renderTimeout   time.Duration
	renders         *renderCache
	isolation       *render.Isolation
	engines         *lru.Cache   // render key without capabilities → render.Engine
	chartDeps       *lru.Cache   // render key without capabilities → a chart's remote []dependency
	verified        *lru.Cache   // origin, keys and digest → oci.Verification
	rendered        atomic.Int64 // renders run (not served from the cache)
}

// enginesRemembered bounds the engines remembered per render key (a few
// hundred bytes each): past it, a Helm App's read re-renders.
const enginesRemembered = 65536

// NewReader prepares the Git cache in opts.CacheDir.
func NewReader(opts Options) (*Reader, error) {
	repos, err := git.NewCache(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	transfer := git.DefaultTransferLimits()
	if opts.Limits.MaxFetchBytes > 0 {
		transfer.MaxFetchBytes = opts.Limits.MaxFetchBytes
	}
	repos.SetTransferLimits(transfer)
	switch {
	case opts.RefsTTL < 0:
		repos.SetRefsTTL(0)
	case opts.RefsTTL > 0:
		repos.SetRefsTTL(opts.RefsTTL)
	}
	if opts.RenderCacheBytes <= 0 {
		opts.RenderCacheBytes = DefaultRenderCacheBytes
	}
	if opts.RenderTimeout <= 0 {
		opts.RenderTimeout = DefaultRenderTimeout
	}
	if opts.Isolation != nil {
		isolation := *opts.Isolation
		isolation.Timeout = opts.RenderTimeout
		opts.Isolation = &isolation
	}
	reader := &Reader{repos: repos, limits: opts.Limits, renderTimeout: opts.RenderTimeout, isolation: opts.Isolation,
		renders: newRenderCache(opts.RenderCacheBytes), engines: lru.New(enginesRemembered), chartDeps: lru.New(enginesRemembered), verified: lru.New(verificationsRemembered),
		registries: &oci.Client{Transport: opts.RegistryTransport, Now: opts.Now}, helmRepos: &helmrepo.Client{Transport: opts.RegistryTransport, IndexMaxAge: opts.HelmIndexMaxAge, Now: opts.Now},
		archiveDigests: lru.New(archiveDigestsRemembered), buckets: &bucket.Client{Transport: opts.RegistryTransport}}
	if opts.AllowInsecureRegistries {
		reader.insecureRegistries = &oci.Client{Transport: opts.RegistryTransport, AllowHTTP: true, Now: opts.Now}
		reader.insecureHelmRepos = &helmrepo.Client{Transport: opts.RegistryTransport, AllowHTTP: true, IndexMaxAge: opts.HelmIndexMaxAge, Now: opts.Now}
		reader.insecureBuckets = &bucket.Client{Transport: opts.RegistryTransport, AllowHTTP: true}
	}
	return reader, nil
}

// Renders is how many renders the Reader has run: reads served from the
// render cache, successful or failed, do not count.
func (r *Reader) Renders() int64 { return r.rendered.Load() }

// Read resolves the ref (one round trip, shared by reads of the same
// repository with the same credentials within a short window), and unless
// the render of that commit is cached for the same repository and
// credentials, fetches what the ref needs and renders the folder. A render
// that failed for a reason that retrying cannot change (an invalid file, a
// limit) is remembered too, so a broken revision is not rendered every tick.
// A request for an OCI artifact (req.OCI) is read as readOCI says, one
// for a Helm chart (req.Helm) as readHelm says.
func (r *Reader) Read(ctx context.Context, req Request) (*Result, error) {
	switch {
	case req.OCI != nil:
		return r.readOCI(ctx, req)
	case req.Helm != nil:
		return r.readHelm(ctx, req)
	case req.Bucket != nil:
		return r.readBucket(ctx, req)
	}
	rev, err := r.repos.Resolve(ctx, req.URL, req.Ref, req.Auth, git.ResolveOptions{Fresh: req.Refresh})
	if err != nil {
		return nil, classify("", err)
	}
	repoKey, err := r.repos.Key(req.URL, req.Auth)
	if err != nil {
		return nil, classify(rev.String(), err)
	}
	rewritten := false
	result, err := r.readContent(ctx, &req, content{
		origin: repoKey, id: rev.Hash, revision: rev.Recorded(),
		fetch: func(ctx context.Context) error {
			if err := r.repos.Fetch(ctx, req.URL, req.Ref, rev, req.Auth); err != nil {
				return classify(rev.String(), err)
			}
			rewritten = r.historyRewritten(req, rev)
			return nil
		},
		tree: func(context.Context) (*tree.Tree, error) {
			t, err := r.repos.Tree(req.URL, req.Auth, rev.Hash, r.treeLimits())
			if err != nil {
				return nil, classify(rev.String(), err)
			}
			return t, nil
		},
		// The commit's date only labels a metric: a commit that cannot
		// say when it was made still renders.
		committed: func() time.Time {
			committed, _ := r.repos.CommitTime(req.URL, req.Auth, rev.Hash)
			return committed
		},
	})
	if err != nil {
		return nil, err
	}
	result.HistoryRewritten = rewritten
	return result, nil
}

// content is what readContent renders: the content id within an origin,
// and how to get its files when the render is not cached.
type content struct {
	// origin is the repository as reached with the request's credentials:
	// a render is served only to a request of the same origin.
	origin string
	// id names the content: a commit, a manifest digest.
	id       string
	revision revision.Revision
	// fetch, when set, makes the content readable (Git's fetch).
	fetch func(context.Context) error
	// tree reads the content's files within the limits.
	tree func(context.Context) (*tree.Tree, error)
	// committed, when set, is when the content was made.
	committed func() time.Time
}

// readContent serves the render of c's folder from the cache, or fetches,
// reads and renders it and caches the render (or its lasting failure).
func (r *Reader) readContent(ctx context.Context, req *Request, c content) (*Result, error) {
	rev := c.revision.String()
	if len(req.ChartRepositories) > 0 {
		c.origin += "\x00charts:" + chartRepositoriesDigest(req.ChartRepositories)
	}
	if req.verifies() {
		// A verified read fetches no dependency: it is never served a
		// render that an unverified read of the same chart made with them.
		c.origin += "\x00verified"
	}
	key, err := renderKey(c.origin, c.id, req.Path, req.Render)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidSpec, Revision: rev, Err: err}
	}
	result := &Result{Revision: c.revision}
	// A Helm chart's render also depends on what the cluster serves, and
	// on the versions its dependencies resolve to now.
	withCaps, depsID := key, ""
	if engine, ok := r.engines.Get(key); ok && engine == render.Helm {
		if withCaps, err = withCapabilities(ctx, req, key); err != nil {
			return nil, &Error{Reason: ReasonRenderFailed, Revision: rev, Err: err, retry: true}
		}
		if deps, ok := r.chartDeps.Get(key); ok {
			if depsID, err = r.resolveDependencies(ctx, req, deps.([]dependency), rev); err != nil {
				return nil, err
			}
		}
	}
	lookup := withCaps + depsID
	if cached, ok := r.renders.get(lookup); ok && !req.Refresh {
		if cached.err != nil {
			return nil, cached.err
		}
		result.Engine, result.Objects, result.LeftOut, result.Cached, result.CommitTime = cached.engine, cached.objects, cached.leftOut, true, cached.committed
		return result, nil
	}
	if c.fetch != nil {
		if err := c.fetch(ctx); err != nil {
			return nil, err
		}
	}
	out, err := r.render(ctx, req, c, key, &withCaps)
	lookup = withCaps + out.dependencies
	if err != nil {
		if lasting(err) && ctx.Err() == nil {
			r.renders.add(lookup, &cachedRender{err: err})
		}
		return nil, err
	}
	var committed time.Time
	if c.committed != nil {
		committed = c.committed()
	}
	r.renders.add(lookup, &cachedRender{engine: out.engine, objects: out.objects, leftOut: out.leftOut, committed: committed})
	result.Engine, result.Objects, result.LeftOut, result.CommitTime = out.engine, out.objects, out.leftOut, committed
	return result, nil
}

// treeLimits are the limits of one content's files.
func (r *Reader) treeLimits() tree.Limits {
	return tree.Limits{MaxFiles: r.limits.MaxFiles, MaxTotalBytes: r.limits.MaxTotalBytes, MaxFileBytes: r.limits.MaxFileBytes}
}

// withCapabilities asks req.Cluster what it serves, puts it in the Helm
// options, and returns the render key that includes it.
func withCapabilities(ctx context.Context, req *Request, key string) (string, error) {
	if req.Cluster == nil {
		return key, nil
	}
	kubeVersion, apiVersions, err := req.Cluster.Capabilities(ctx)
	if err != nil {
		return "", fmt.Errorf("asking the cluster what it serves, for Helm's .Capabilities: %w", err)
	}
	req.Render.Helm.KubeVersion, req.Render.Helm.APIVersions = kubeVersion, apiVersions
	sum := sha256.Sum256([]byte(kubeVersion + "\n" + strings.Join(apiVersions, "\n")))
	return key + "\x00" + hex.EncodeToString(sum[:]), nil
}

// render reads the content's tree and renders the folder, within the
// limits and the render timeout. For a Helm chart it first asks what the
// cluster serves, and moves *lookup to the render key that includes it;
// what it gives names the dependencies' versions, also with an error.
func (r *Reader) render(ctx context.Context, req *Request, c content, key string, lookup *string) (rendered, error) {
	r.rendered.Add(1)
	rev := c.revision.String()
	t, err := c.tree(ctx)
	if err != nil {
		return rendered{}, err
	}
	depsID := ""
	if engine, err := render.Detect(t, req.Path); err == nil {
		r.engines.Add(key, engine)
		if engine == render.Helm {
			if t, depsID, err = r.withDependencies(ctx, req, t, req.Path, rev, key); err != nil {
				return rendered{dependencies: depsID}, err
			}
		}
		if engine == render.Helm && req.Render.Helm.KubeVersion == "" {
			helmKey, err := withCapabilities(ctx, req, key)
			if err != nil {
				return rendered{dependencies: depsID}, &Error{Reason: ReasonRenderFailed, Revision: rev, Err: err, retry: true}
			}
			*lookup = helmKey
		}
	}
	opts := req.Render
	opts.Isolation = r.isolation
	out, err := renderTree(ctx, t, req.Path, opts, r.limits, r.renderTimeout, rev)
	out.dependencies = depsID
	return out, err
}

// rendered is what a render of a folder gave: the encoded objects to
// apply, and those left out.
type rendered struct {
	engine  render.Engine
	objects []*Object
	leftOut []render.LeftOut
	// dependencies names the versions of a chart's remote dependencies
	// that the render used, for its cache key ("" without any).
	dependencies string
}

// renderTree renders the folder dir of t within the render timeout and
// the object limit, leaves a chart's test hooks out, and encodes the
// objects; errors name revision and never quote a Secret's value.
func renderTree(ctx context.Context, t *tree.Tree, dir string, opts render.Options, limits Limits, timeout time.Duration,
	revision string) (rendered, error) {
	renderCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	engine, objects, err := render.Render(renderCtx, t, dir, opts)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = &tree.LimitError{Limit: "render time in seconds", Max: int64(timeout.Seconds()),
				Got: int64(timeout.Seconds()), Path: displayPath(dir)}
		}
		return rendered{}, classify(revision, redactSecrets(err, t))
	}
	var leftOut []render.LeftOut
	if engine == render.Helm {
		objects, leftOut = render.LeaveOutHelmTests(objects)
	}
	if max := limits.MaxObjects; max > 0 && len(objects) > max {
		return rendered{}, &Error{Reason: ReasonLimitExceeded, Revision: revision,
			Err: &tree.LimitError{Limit: "rendered object count", Max: int64(max), Got: int64(len(objects)), Path: displayPath(dir)}}
	}
	if err := manifest.Duplicates(objects); err != nil {
		return rendered{}, &Error{Reason: ReasonInvalidManifest, Revision: revision, Err: err}
	}
	encoded, err := encodeAll(objects)
	if err != nil {
		return rendered{}, &Error{Reason: ReasonInvalidManifest, Revision: revision, Err: err}
	}
	return rendered{engine: engine, objects: encoded, leftOut: leftOut}, nil
}

// lasting reports a read error that the same revision, path and options
// will always give: the content is wrong or too large — not a failure of
// the cluster's discovery or of the render process itself.
func lasting(err error) bool {
	var readErr *Error
	if errors.As(err, &readErr) && readErr.retry || errors.Is(err, render.ErrRenderProcess) || errors.Is(err, git.ErrTooLarge) {
		return false
	}
	switch ReasonOf(err) {
	case ReasonInvalidManifest, ReasonRenderFailed, ReasonLimitExceeded:
		var limitErr *tree.LimitError
		if errors.As(err, &limitErr) && limitErr.Limit == "render time in seconds" {
			return false // a slow machine may render it in time later
		}
		return true
	}
	return false
}

// historyRewritten compares the new commit of a branch with the last one read.
func (r *Reader) historyRewritten(req Request, rev git.Revision) bool {
	if req.Ref.Branch == "" || req.LastRevision == "" {
		return false
	}
	last := git.ParseRevision(req.LastRevision)
	if last.Hash == "" || last.Name != rev.Name || last.Hash == rev.Hash {
		return false
	}
	isAncestor, err := r.repos.IsAncestor(req.URL, req.Auth, last.Hash, rev.Hash)
	return err == nil && !isAncestor
}

// renderKey identifies a render: the repository as reached with the
// request's credentials (repoKey), the commit, the folder and the options.
// A render is served only to a request with the same repoKey: one that
// proved access to the same repository with the same credentials.
func renderKey(repoKey, hash, dir string, opts render.Options) (string, error) {
	encoded, err := json.Marshal(opts)
	if err != nil {
		return "", fmt.Errorf("encoding the render options: %w", err)
	}
	sum := sha256.Sum256(encoded)
	return repoKey + "\x00" + hash + "\x00" + strings.Trim(pathpkg.Clean("/"+dir), "/") + "\x00" + hex.EncodeToString(sum[:]), nil
}

func displayPath(p string) string {
	if strings.Trim(p, "/.") == "" {
		return "the repository root"
	}
	return p
}
