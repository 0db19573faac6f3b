package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart"
	"sigs.k8s.io/yaml"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// ChartRepository is the account of a repository that a chart's
// dependencies come from (from a Secret in the App's namespace).
type ChartRepository struct {
	// URL is the repository as the chart's dependencies name it:
	// https://…, http://… or oci://host/path.
	URL string
	// Helm is the basic-auth account of an HTTP repository.
	Helm helmrepo.Auth
	// OCI is the account of an OCI registry.
	OCI oci.Auth
	// Insecure reads an oci:// repository over plain HTTP; the Reader
	// refuses it unless its Options allow insecure registries.
	Insecure bool
}

// maxChartDependencies bounds the dependencies a chart may have fetched.
const maxChartDependencies = 32

// ErrDependency is a dependency of a chart that cannot be built.
var ErrDependency = errors.New("chart dependency")

// dependency is one entry of a chart's dependencies to build.
type dependency struct {
	name, repository, version string
}

// withDependencies is t with the dependencies of the chart in dir that
// are not vendored under its charts/ folder fetched from their
// repositories (as `helm dependency build` would: at Chart.lock's version
// when it names one, else the highest in the range) and added under
// charts/<name>, within t's limits: the render that follows runs in the
// sandbox with no network. A dependency with no repository stays the
// render's to refuse. It remembers the remote dependencies under the
// render key, so that later reads resolve them before the render cache
// is asked, and returns what names their resolved versions.
func (r *Reader) withDependencies(ctx context.Context, req *Request, t *tree.Tree, dir, rev, key string) (*tree.Tree, string, error) {
	fail := func(reason Reason, err error) error {
		return &Error{Reason: reason, Revision: rev, Err: err}
	}
	dir = strings.Trim(path.Clean("/"+dir), "/")
	deps, err := missingDependencies(t, dir)
	if err != nil {
		return nil, "", fail(ReasonInvalidManifest, err)
	}
	if len(deps) > maxChartDependencies {
		return nil, "", fail(ReasonLimitExceeded, &tree.LimitError{Limit: "chart dependencies to fetch", Max: maxChartDependencies,
			Got: int64(len(deps)), Path: path.Join(dir, "Chart.yaml")})
	}
	var remote []dependency
	for _, d := range deps {
		if err := checkDependencyRepository(d); err != nil {
			return nil, "", dependencyError(rev, d, err)
		}
		if !strings.HasPrefix(d.repository, "file://") {
			remote = append(remote, d)
		}
	}
	if len(remote) > 0 && req.verifies() {
		// What a signature covers is the archive: a dependency fetched
		// from elsewhere would be applied under a verified revision
		// without anyone's signature on it.
		return nil, "", dependencyError(rev, remote[0], &Error{Reason: ReasonVerificationFailed,
			Err: errors.New("the source is verified, and this dependency is not in the signed chart: it would be fetched unverified " +
				"from its repository; vendor it under charts/ before signing (helm dependency build)")})
	}
	r.chartDeps.Add(key, remote)
	depsID, err := r.resolveDependencies(ctx, req, remote, rev)
	if err != nil || len(deps) == 0 {
		return t, depsID, err
	}
	limits := t.Limits()
	files, bytes := t.FileCount(), t.TotalBytes()
	subs := map[string]*tree.Tree{}
	for _, d := range deps {
		left := limits
		if left.MaxFiles > 0 {
			left.MaxFiles = max(limits.MaxFiles-files, 1)
		}
		if left.MaxTotalBytes > 0 {
			left.MaxTotalBytes = max(limits.MaxTotalBytes-bytes, 1)
		}
		var sub *tree.Tree
		if res, ok := req.dependencies[dependencyKey(d)]; ok {
			sub, err = res.pull(ctx, left)
		} else {
			sub, err = fileDependency(t, dir, d, left)
		}
		if err != nil {
			return nil, depsID, dependencyError(rev, d, err)
		}
		files, bytes = files+sub.FileCount(), bytes+sub.TotalBytes()
		subs[path.Join(dir, "charts", d.name)] = sub
	}
	grafted, err := t.Graft(subs)
	if err != nil {
		return nil, depsID, classify(rev, err)
	}
	return grafted, depsID, nil
}

// dependencyError names the dependency a read failed on. A repository's
// failure may pass; the chart's own mistake lasts.
func dependencyError(rev string, d dependency, err error) error {
	var readErr *Error
	if !errors.As(err, &readErr) {
		readErr = &Error{Reason: ReasonOf(err), Err: err}
	}
	retry := readErr.retry || readErr.Reason != ReasonInvalidManifest
	return &Error{Reason: readErr.Reason, Revision: rev, retry: retry,
		Err: fmt.Errorf("%w %q (%s): %w", ErrDependency, d.name, d.version, readErr.Err)}
}

// resolvedDependency is a remote dependency at the version its repository
// serves now.
type resolvedDependency struct {
	// id names what pull reads: the repository, the chart, the version
	// and the digest the repository gives for it.
	id   string
	pull func(ctx context.Context, limits tree.Limits) (*tree.Tree, error)
}

// dependencyKey names a dependency as a chart declares it.
func dependencyKey(d dependency) string {
	return d.name + "\x00" + d.repository + "\x00" + d.version
}

// resolveDependencies resolves the remote dependencies that req has not
// resolved yet (a shared index within its max age costs no request; an
// OCI one a tag listing and a manifest HEAD) into req.dependencies, and
// returns what names their versions, for the render's cache key: a new
// version in a dependency's range is a new render.
func (r *Reader) resolveDependencies(ctx context.Context, req *Request, deps []dependency, rev string) (string, error) {
	if len(deps) == 0 {
		return "", nil
	}
	if req.dependencies == nil {
		req.dependencies = map[string]resolvedDependency{}
	}
	ids := make([]string, 0, len(deps))
	for _, d := range deps {
		key := dependencyKey(d)
		res, ok := req.dependencies[key]
		if !ok {
			var err error
			if strings.HasPrefix(d.repository, "oci://") {
				res, err = r.ociDependency(ctx, req, d)
			} else {
				res, err = r.helmDependency(ctx, req, d)
			}
			if err != nil {
				return "", dependencyError(rev, d, err)
			}
			req.dependencies[key] = res
		}
		ids = append(ids, res.id)
	}
	return "\x00dependencies:" + partsDigest(ids...), nil
}

// missingDependencies lists the dependencies of the chart in dir (its
// Chart.yaml, or requirements.yaml for an apiVersion v1 chart) that have a
// repository and are not vendored: neither charts/<name>/Chart.yaml nor a
// charts/<name>-<version>.tgz is there. Versions are Chart.lock's (or
// requirements.lock's) where it locks the same name and repository.
func missingDependencies(t *tree.Tree, dir string) ([]dependency, error) {
	var meta chart.Metadata
	if err := readYAML(t, path.Join(dir, "Chart.yaml"), &meta); err != nil {
		return nil, err
	}
	declared, lockFile := meta.Dependencies, "Chart.lock"
	if meta.APIVersion == chart.APIVersionV1 {
		var req struct {
			Dependencies []*chart.Dependency `json:"dependencies"`
		}
		if t.Exists(path.Join(dir, "requirements.yaml")) {
			if err := readYAML(t, path.Join(dir, "requirements.yaml"), &req); err != nil {
				return nil, err
			}
		}
		declared, lockFile = req.Dependencies, "requirements.lock"
	}
	locked := map[string]string{}
	if t.Exists(path.Join(dir, lockFile)) {
		var lock chart.Lock
		if err := readYAML(t, path.Join(dir, lockFile), &lock); err != nil {
			return nil, err
		}
		for _, d := range lock.Dependencies {
			if d != nil {
				locked[d.Name+"\x00"+d.Repository] = d.Version
			}
		}
	}
	vendored, err := vendoredCharts(t, dir, declared)
	if err != nil {
		return nil, err
	}
	isVendored := func(name string) bool { return vendored[name] }
	var out []dependency
	seen := map[string]bool{}
	for _, d := range declared {
		if d == nil || d.Repository == "" || seen[d.Name] || isVendored(d.Name) {
			continue
		}
		if d.Name == "" || strings.ContainsAny(d.Name, "/\\") || d.Name == "." || d.Name == ".." {
			return nil, fmt.Errorf("%s: a dependency named %q", path.Join(dir, "Chart.yaml"), d.Name)
		}
		seen[d.Name] = true
		version := d.Version
		if v, ok := locked[d.Name+"\x00"+d.Repository]; ok {
			version = v
		}
		out = append(out, dependency{name: d.Name, repository: d.Repository, version: version})
	}
	return out, nil
}

func readYAML(t *tree.Tree, file string, into any) error {
	data, err := t.ReadFile(file)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// Bounds on reading the archives under a chart's charts/ for their names:
// a Chart.yaml comes first in what `helm package` writes.
const (
	maxVendoredArchives     = 32      // archives opened for one chart
	maxVendoredScanBytes    = 1 << 20 // unpacked bytes read of one archive
	maxVendoredChartYAMLLen = 64 << 10
)

// vendoredCharts says which of the declared dependencies that have a
// repository are vendored under dir's charts/, found as Helm finds them:
// a folder or a .tgz whose Chart.yaml names the dependency. Cheap signs
// are looked at first (a folder charts/<name>/ with a Chart.yaml, an
// archive <name>-<semver>.tgz); only for dependencies still not found are
// the folders' Chart.yaml files read, and then the other archives opened:
// streamed, at most maxVendoredArchives of them, each until its
// Chart.yaml and no further than maxVendoredScanBytes. So charts/pg.tgz
// holding postgresql is not fetched again, and a chart that needs no
// fetch opens nothing.
func vendoredCharts(t *tree.Tree, dir string, declared []*chart.Dependency) (map[string]bool, error) {
	vendored := map[string]bool{}
	entries, err := t.ReadDir(path.Join(dir, "charts"))
	if err != nil {
		return vendored, nil // no charts/ folder
	}
	missing := map[string]bool{}
	for _, d := range declared {
		if d == nil || d.Repository == "" {
			continue
		}
		if t.Exists(path.Join(dir, "charts", d.Name, "Chart.yaml")) {
			vendored[d.Name] = true
			continue
		}
		for _, n := range entries {
			version, ok := strings.CutPrefix(strings.TrimSuffix(n, ".tgz"), d.Name+"-")
			if _, err := semver.NewVersion(version); ok && strings.HasSuffix(n, ".tgz") && err == nil {
				vendored[d.Name] = true // <name>-<version>.tgz, not <name>-<other>-<version>.tgz
			}
		}
		if !vendored[d.Name] {
			missing[d.Name] = true
		}
	}
	found := func(name string) {
		if missing[name] {
			vendored[name] = true
			delete(missing, name)
		}
	}
	for _, n := range entries {
		if len(missing) == 0 {
			return vendored, nil
		}
		if file := path.Join(dir, "charts", n, "Chart.yaml"); t.Exists(file) {
			var meta chart.Metadata
			if err := readYAML(t, file, &meta); err != nil {
				return nil, err
			}
			found(meta.Name)
		}
	}
	opened := 0
	for _, n := range entries {
		if len(missing) == 0 || opened == maxVendoredArchives {
			break
		}
		if !strings.HasSuffix(n, ".tgz") {
			continue
		}
		opened++
		file := path.Join(dir, "charts", n)
		data, err := t.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if name, ok := archiveChartName(data); ok {
			found(name)
		}
	}
	return vendored, nil
}

// archiveChartName is the name in the Chart.yaml of a chart archive (its
// first folder's, "./" or not, as Helm reads archives), if one is found
// within maxVendoredScanBytes of unpacked bytes.
func archiveChartName(data []byte) (string, bool) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", false
	}
	defer gz.Close()
	budget := &io.LimitedReader{R: gz, N: maxVendoredScanBytes}
	tr := tar.NewReader(budget)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", false
		}
		parts := strings.Split(h.Name, "/") // Helm drops the first part, whatever it is ("." too)
		if len(parts) != 2 || parts[1] != "Chart.yaml" || h.Typeflag != tar.TypeReg {
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(tr, maxVendoredChartYAMLLen))
		if err != nil {
			return "", false
		}
		var meta chart.Metadata
		if err := yaml.Unmarshal(raw, &meta); err != nil || meta.Name == "" {
			return "", false
		}
		return meta.Name, true
	}
}

// checkDependencyRepository refuses a dependency's repository that plumb
// cannot or will not read.
func checkDependencyRepository(d dependency) error {
	scheme, rest, _ := strings.Cut(d.repository, "://")
	// Any "@" may end a user part, also in a URL that does not parse (a
	// password with "%" or "/" in it): the URL is never shown.
	if u, err := url.Parse(d.repository); err == nil && u.User != nil || scheme != "file" && strings.Contains(rest, "@") {
		return &Error{Reason: ReasonInvalidManifest, Err: errors.New("its repository URL holds credentials: give them in a Secret (spec.helm.repositories)")}
	}
	switch scheme {
	case "file", "http", "https", "oci":
		return nil
	}
	if strings.HasPrefix(d.repository, "@") || strings.HasPrefix(d.repository, "alias:") {
		return &Error{Reason: ReasonInvalidManifest, Err: fmt.Errorf("its repository %s is a name of `helm repo add`, which plumb does not know: give the repository's URL", d.repository)}
	}
	return &Error{Reason: ReasonInvalidManifest, Err: errors.New("its repository is not an https://, http://, oci:// or file:// URL")}
}

// fileDependency is a dependency in a folder of the same tree.
func fileDependency(t *tree.Tree, dir string, d dependency, limits tree.Limits) (*tree.Tree, error) {
	rel := strings.TrimPrefix(d.repository, "file://")
	if strings.HasPrefix(rel, "/") {
		return nil, &Error{Reason: ReasonInvalidManifest, Err: fmt.Errorf("%s is an absolute path: a file:// dependency must be in the same repository", d.repository)}
	}
	folder := path.Join(dir, rel)
	sub, err := t.Sub(folder, limits)
	if err != nil {
		return nil, classify("", err)
	}
	if !sub.Exists("Chart.yaml") {
		return nil, &Error{Reason: ReasonInvalidManifest, Err: fmt.Errorf("%s holds no Chart.yaml", folder)}
	}
	return sub, nil
}

// helmDependency resolves a dependency in an HTTP Helm repository,
// through the same shared index as a Helm source.
func (r *Reader) helmDependency(ctx context.Context, req *Request, d dependency) (resolvedDependency, error) {
	repos := r.helmRepos
	if strings.HasPrefix(d.repository, "http://") {
		if r.insecureHelmRepos == nil {
			return resolvedDependency{}, &Error{Reason: ReasonInvalidManifest, Err: ErrInsecureHelmRepository} // the chart names it
		}
		repos = r.insecureHelmRepos
	}
	auth := helmrepo.Auth{}
	if account, ok := req.chartRepository(d.repository); ok {
		auth = account.Helm
	} else if req.Helm != nil && sameRepository(req.Helm.Repository, d.repository) {
		auth = req.Helm.Auth // the source's own repository
	}
	index, err := repos.Index(ctx, d.repository, auth, req.Refresh)
	if err != nil {
		return resolvedDependency{}, chartsMistake(classifyHelm("", err))
	}
	cv, err := index.Index.Resolve(d.name, d.version)
	if err != nil {
		return resolvedDependency{}, chartsMistake(classifyHelm("", err))
	}
	digest := helmrepo.NormalDigest(cv.Digest)
	if digest == "" {
		digest = "index " + index.Digest // an index that gives none: any change of it
	}
	return resolvedDependency{
		id: strings.Join([]string{"helm", strings.TrimSuffix(d.repository, "/"), d.name, cv.Version, digest}, "\x00"),
		pull: func(ctx context.Context, limits tree.Limits) (*tree.Tree, error) {
			pulled, err := repos.Pull(ctx, d.repository, cv, auth, limits, r.limits.MaxFetchBytes)
			if err != nil {
				return nil, classifyHelm("", err)
			}
			return chartFolder(pulled.Tree, limits)
		},
	}, nil
}

// chartsMistake is err, a dependency's, with what would be a malformed
// spec for a source (a URL or a range that cannot be read) told as the
// chart's mistake: a commit mends it, not the App's spec, and the App is
// not stalled.
func chartsMistake(err error) error {
	var readErr *Error
	if errors.As(err, &readErr) && readErr.Reason == ReasonInvalidSpec {
		return &Error{Reason: ReasonInvalidManifest, Revision: readErr.Revision, Err: readErr.Err}
	}
	return err
}

// ociDependency resolves a dependency's Helm chart in an OCI registry:
// oci://host/path/<name>, at the tag of an exact version or the highest
// tag in the range, pulled by the digest resolved.
func (r *Reader) ociDependency(ctx context.Context, req *Request, d dependency) (resolvedDependency, error) {
	account, _ := req.chartRepository(d.repository)
	registries := r.registries
	if account.Insecure {
		if r.insecureRegistries == nil {
			return resolvedDependency{}, &Error{Reason: ReasonInvalidSpec, Err: ErrInsecureRegistry}
		}
		registries = r.insecureRegistries
	}
	ref := oci.ChartRef(d.version)
	u := strings.TrimSuffix(d.repository, "/") + "/" + d.name
	resolve := registries.Resolve
	if req.Refresh {
		resolve = registries.ResolveFresh(req.FreshSince)
	}
	rev, err := resolve(ctx, u, ref, account.OCI)
	if err != nil {
		return resolvedDependency{}, chartsMistake(classifyOCI("", err))
	}
	return resolvedDependency{
		id: strings.Join([]string{"oci", u, rev.String(), fmt.Sprint(account.Insecure)}, "\x00"),
		pull: func(ctx context.Context, limits tree.Limits) (*tree.Tree, error) {
			t, err := registries.Pull(ctx, u, rev, account.OCI, oci.MediaTypeHelmChart, oci.Limits{Tree: limits, MaxLayerBytes: r.limits.MaxFetchBytes})
			if err != nil {
				return nil, classifyOCI("", err)
			}
			return chartFolder(t, limits)
		},
	}, nil
}

// chartFolder is the one folder at the root of a chart archive, which
// holds the chart.
func chartFolder(t *tree.Tree, limits tree.Limits) (*tree.Tree, error) {
	names, err := t.ReadDir("")
	if err != nil || len(names) != 1 || !t.Exists(names[0]+"/Chart.yaml") {
		return nil, &Error{Reason: ReasonInvalidManifest, Err: errors.New("the archive does not hold one chart folder with a Chart.yaml")}
	}
	return t.Sub(names[0], limits)
}

// verifies says whether the source asks for a signature (of an OCI
// artifact or chart, or a Helm chart's provenance).
func (req *Request) verifies() bool {
	return req.OCI != nil && req.OCI.Verify != nil || req.Helm != nil && req.Helm.Verify != nil
}

// chartRepository is the account the request gives for a repository.
func (req *Request) chartRepository(repository string) (ChartRepository, bool) {
	for _, account := range req.ChartRepositories {
		if sameRepository(account.URL, repository) {
			return account, true
		}
	}
	return ChartRepository{}, false
}

// sameRepository says whether two repository URLs name the same one (a
// trailing slash aside).
func sameRepository(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// chartRepositoriesDigest digests the accounts of a request's chart
// repositories, so that renders that fetched dependencies with one set of
// accounts are never served to a request with another.
func chartRepositoriesDigest(accounts []ChartRepository) string {
	parts := make([]string, 0, len(accounts))
	for _, a := range accounts {
		parts = append(parts, partsDigest(strings.TrimSuffix(a.URL, "/"), a.Helm.Username, a.Helm.Password,
			a.OCI.Username, a.OCI.Password, fmt.Sprint(a.Insecure)))
	}
	sort.Strings(parts)
	return partsDigest(parts...)
}
