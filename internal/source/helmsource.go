package source

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// HelmRequest names a chart of an HTTP Helm repository, read in place of
// a Git repository. (A chart in an OCI registry is an OCIRequest for its
// Helm chart layer.)
type HelmRequest struct {
	// Repository is the repository's URL, https:// (or http://, which the
	// Reader refuses unless its Options allow insecure repositories).
	Repository string
	// Chart is the chart's name in the repository's index.
	Chart string
	// Version is a semver range or an exact version; empty is the highest
	// stable version.
	Version string
	// Auth is the basic-auth account from the App's Secret.
	Auth helmrepo.Auth
	// Verify, when set, reads a version only if its provenance file
	// (<archive>.prov) is signed by one of Keys (OpenPGP public keyrings,
	// armored or binary, by name) and vouches for the archive read.
	Verify *HelmVerify
}

// HelmVerify are the keyrings that a Helm chart's provenance must be
// signed with.
type HelmVerify struct {
	Keys map[string][]byte
}

// ErrInsecureHelmRepository is a request for a plain HTTP Helm repository
// that the controller does not allow.
var ErrInsecureHelmRepository = errors.New("an http:// Helm repository is read over plain HTTP, which this controller refuses (it runs without --allow-insecure-registries)")

// archiveDigestsRemembered bounds the archive digests remembered for
// indexes that give none (a few hundred bytes each).
const archiveDigestsRemembered = 4096

// readHelm resolves the chart's version in the repository's index (shared
// by every read of the repository with the same account: within its max
// age no request, after it one conditional GET) and, unless the render of
// that archive is cached for the same repository, account and chart,
// downloads the archive, checks it against the index's digest, and
// renders the chart. The revision is <version>@sha256:<archive digest>.
func (r *Reader) readHelm(ctx context.Context, req Request) (*Result, error) {
	h := req.Helm
	req.Path = h.Chart // the chart's folder in its archive
	repos := r.helmRepos
	if strings.HasPrefix(h.Repository, "http://") {
		if r.insecureHelmRepos == nil {
			return nil, &Error{Reason: ReasonInvalidSpec, Err: ErrInsecureHelmRepository}
		}
		repos = r.insecureHelmRepos
	}
	index, err := repos.Index(ctx, h.Repository, h.Auth, req.Refresh)
	if err != nil {
		return nil, classifyHelm("", err)
	}
	cv, err := index.Index.Resolve(h.Chart, h.Version)
	if err != nil {
		return nil, classifyHelm("", err)
	}
	origin := helmOrigin(h)
	pull := func(ctx context.Context, rev string) (*helmrepo.Pulled, error) {
		pulled, err := repos.Pull(ctx, h.Repository, cv, h.Auth, r.treeLimits(), r.limits.MaxFetchBytes)
		if err != nil {
			return nil, classifyHelm(rev, err)
		}
		return pulled, nil
	}
	digest := helmrepo.NormalDigest(cv.Digest)
	var pulled *helmrepo.Pulled
	if digest == "" {
		// The index gives no digest: the archive's own is the revision's,
		// remembered for as long as the index is the same.
		key := origin + "\x00" + index.Digest + "\x00" + cv.Version
		if d, ok := r.archiveDigests.Get(key); ok && !req.Refresh {
			digest = d.(string)
		} else {
			if pulled, err = pull(ctx, cv.Version); err != nil {
				return nil, err
			}
			digest = pulled.Digest
			r.archiveDigests.Add(key, digest)
		}
	}
	recorded := revision.Revision{Name: cv.Version, Digest: digest}
	var verified *oci.Verification
	if h.Verify != nil {
		if verified, err = r.verifyHelm(ctx, repos, h, origin, cv, digest, req.Refresh); err != nil {
			if errors.Is(err, helmrepo.ErrNotVerified) || errors.Is(err, errVerificationKeys) {
				return nil, &Error{Reason: ReasonVerificationFailed, Revision: recorded.String(), Err: err, retry: true}
			}
			return nil, classifyHelm(recorded.String(), err)
		}
	}
	result, err := r.readContent(ctx, &req, content{
		origin: origin, id: digest, revision: recorded,
		tree: func(ctx context.Context) (*tree.Tree, error) {
			if pulled == nil {
				if pulled, err = pull(ctx, recorded.String()); err != nil {
					return nil, err
				}
			}
			if pulled.Digest != digest {
				// The archive changed since its digest was remembered:
				// forgotten, so that the next read records the new one.
				r.archiveDigests.Remove(origin + "\x00" + index.Digest + "\x00" + cv.Version)
				return nil, &Error{Reason: ReasonSourceUnavailable, Revision: recorded.String(), retry: true,
					Err: fmt.Errorf("%w: the archive of version %s is now %s", helmrepo.ErrDigestMismatch, cv.Version, pulled.Digest)}
			}
			if !pulled.Tree.Exists(h.Chart + "/Chart.yaml") {
				return nil, &Error{Reason: ReasonInvalidManifest, Revision: recorded.String(),
					Err: fmt.Errorf("the archive of chart %s %s holds no %s/Chart.yaml", h.Chart, cv.Version, h.Chart)}
			}
			return pulled.Tree, nil
		},
	})
	if err != nil {
		return nil, err
	}
	result.Verified = verified
	return result, nil
}

// verifyHelm checks the provenance of the archive of digest, or serves
// the check made before for the same repository, account, keys and
// digest (unless refresh asks afresh): an unchanged revision costs no
// request for it. A failure is not remembered, so that a provenance file
// published after the archive is found on the next read.
func (r *Reader) verifyHelm(ctx context.Context, repos *helmrepo.Client, h *HelmRequest, origin string, cv helmrepo.ChartVersion, digest string, refresh bool) (*oci.Verification, error) {
	key := origin + "\x00provenance\x00" + keysDigest(h.Verify.Keys) + "\x00" + cv.Version + "\x00" + digest
	if v, ok := r.verified.Get(key); ok && !refresh {
		verification := v.(oci.Verification)
		return &verification, nil
	}
	name, err := helmrepo.ArchiveName(h.Repository, cv)
	if err != nil {
		return nil, err
	}
	prov, err := repos.Provenance(ctx, h.Repository, cv, h.Auth)
	if err != nil {
		return nil, err
	}
	signer, err := helmrepo.VerifyProvenance(prov, helmrepo.Signed{Archive: name, Digest: digest, Chart: h.Chart, Version: cv.Version}, h.Verify.Keys)
	if err != nil {
		if !errors.Is(err, helmrepo.ErrNotVerified) {
			err = fmt.Errorf("%w: %v", errVerificationKeys, err)
		}
		return nil, err
	}
	verification := oci.Verification{Digest: digest, Key: signer}
	r.verified.Add(key, verification)
	return &verification, nil
}

// helmOrigin keys a chart's renders by the repository, the chart and a
// digest of the account that proved access.
func helmOrigin(h *HelmRequest) string {
	return "helm\x00" + partsDigest(strings.TrimSuffix(h.Repository, "/"), h.Chart, h.Auth.Username, h.Auth.Password)
}

// classifyHelm wraps an error of package helmrepo with the reason an
// operator can act on; others go to classify.
func classifyHelm(revision string, err error) error {
	reason := ReasonSourceUnavailable
	retry := false
	switch {
	case errors.Is(err, helmrepo.ErrInvalidURL), errors.Is(err, helmrepo.ErrInvalidVersion):
		reason = ReasonInvalidSpec
	case errors.Is(err, helmrepo.ErrChartNotFound), errors.Is(err, helmrepo.ErrNotFound):
		reason = ReasonRevisionNotFound
	case errors.Is(err, helmrepo.ErrLimitExceeded):
		reason = ReasonLimitExceeded
	case errors.Is(err, helmrepo.ErrInvalidIndex):
		reason = ReasonInvalidManifest
		retry = true // the index may be fixed without a new version
	case errors.Is(err, helmrepo.ErrDigestMismatch), errors.Is(err, helmrepo.ErrUnauthorized), errors.Is(err, helmrepo.ErrPlainHTTP):
		retry = true
	default:
		return classify(revision, err)
	}
	return &Error{Reason: reason, Revision: revision, Err: err, retry: retry}
}
