package source

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// OCIRequest names an artifact in an OCI registry, read in place of a Git
// repository.
type OCIRequest struct {
	// URL is the repository, oci://host[:port]/path.
	URL string
	// Ref is the tag, semver range or digest (the tag latest when zero).
	Ref oci.Ref
	// Auth is the account from the App's dockerconfigjson Secret.
	Auth oci.Auth
	// LayerMediaType, when set, picks the layer to read.
	LayerMediaType string
	// Insecure reads the registry over plain HTTP; the Reader refuses it
	// unless its Options allow insecure registries.
	Insecure bool
	// Verify, when set, asks for a cosign signature of the revision by
	// one of its keys before any of the artifact is read.
	Verify *OCIVerify
}

// OCIVerify is the signature an artifact must carry.
type OCIVerify struct {
	// Keys are PEM public keys by name (the .pub keys of the App's
	// verification Secret).
	Keys map[string][]byte
}

// errVerificationKeys is a verification Secret whose keys do not parse.
var errVerificationKeys = errors.New("the verification keys")

// verificationsRemembered bounds the verified digests remembered (a few
// hundred bytes each); past it, a verification is made again.
const verificationsRemembered = 4096

// ErrInsecureRegistry is a request for a plain HTTP registry that the
// controller does not allow.
var ErrInsecureRegistry = errors.New("oci.insecure asks for plain HTTP, which this controller refuses (it runs without --allow-insecure-registries)")

// readOCI resolves the artifact's reference with one manifest HEAD (the
// tags are listed first for a semver range) and, unless the render of
// that manifest digest is cached for the same repository and account,
// downloads the content layer, unpacks it within the limits and renders
// the folder as a Git commit's would be.
func (r *Reader) readOCI(ctx context.Context, req Request) (*Result, error) {
	o := req.OCI
	registries := r.registries
	if o.Insecure {
		if r.insecureRegistries == nil {
			return nil, &Error{Reason: ReasonInvalidSpec, Err: ErrInsecureRegistry}
		}
		registries = r.insecureRegistries
	}
	resolve := registries.Resolve
	if req.Refresh {
		resolve = registries.ResolveFresh(req.FreshSince)
	}
	ref := o.Ref
	if o.LayerMediaType == oci.MediaTypeHelmChart {
		ref.ChartTags = true // a chart's tags, as `helm push` writes them
	}
	rev, err := resolve(ctx, o.URL, ref, o.Auth)
	if err != nil {
		return nil, classifyOCI("", err)
	}
	recorded, origin := revision.Parse(rev.String()), ociOrigin(o)
	var verified *oci.Verification
	if o.Verify != nil {
		if verified, err = r.verifyOCI(ctx, registries, o, origin, rev, req.Refresh); err != nil {
			if errors.Is(err, oci.ErrNotVerified) || errors.Is(err, errVerificationKeys) {
				return nil, &Error{Reason: ReasonVerificationFailed, Revision: recorded.String(), Err: err, retry: true}
			}
			return nil, classifyOCI(recorded.String(), err) // the registry's failure, not the signature's
		}
	}
	result, err := r.readContent(ctx, &req, content{
		origin: origin, id: rev.Digest, revision: recorded,
		tree: func(ctx context.Context) (*tree.Tree, error) {
			t, err := registries.Pull(ctx, o.URL, rev, o.Auth, o.LayerMediaType, oci.Limits{Tree: r.treeLimits(), MaxLayerBytes: r.limits.MaxFetchBytes})
			if err != nil {
				return nil, classifyOCI(recorded.String(), err)
			}
			return t, nil
		},
	})
	if err != nil {
		return nil, err
	}
	result.Verified = verified
	return result, nil
}

// verifyOCI checks rev's cosign signature with o's keys, or finds that it
// was checked before for the same repository, account and keys (unless
// refresh asks afresh): an unchanged revision costs no request for it.
// A failure is not remembered, so that a signature pushed after the
// artifact is found on the next read.
func (r *Reader) verifyOCI(ctx context.Context, registries *oci.Client, o *OCIRequest, origin string, rev oci.Revision, refresh bool) (*oci.Verification, error) {
	key := origin + "\x00" + keysDigest(o.Verify.Keys) + "\x00" + rev.Digest
	if v, ok := r.verified.Get(key); ok && !refresh {
		// Only keys that parsed were ever remembered: no parse is needed.
		verification := v.(oci.Verification)
		return &verification, nil
	}
	keys, err := oci.ParsePublicKeys(o.Verify.Keys)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errVerificationKeys, err)
	}
	verification, err := registries.VerifyCosign(ctx, o.URL, rev, o.Auth, keys)
	if err != nil {
		return nil, err
	}
	r.verified.Add(key, verification)
	return &verification, nil
}

// keysDigest digests a set of named keys, in the order of their names,
// each part length-prefixed so that no two sets digest alike.
func keysDigest(keys map[string][]byte) string {
	names := make([]string, 0, len(keys))
	for n := range keys {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, 2*len(names))
	for _, n := range names {
		parts = append(parts, n, string(keys[n]))
	}
	return partsDigest(parts...)
}

// ociOrigin keys an artifact's renders by the repository, the way it is
// reached (HTTPS or plain HTTP), the layer read and a digest of the
// account that proved access.
func ociOrigin(o *OCIRequest) string {
	return "oci\x00" + partsDigest(o.URL, fmt.Sprint(o.Insecure), o.LayerMediaType, o.Auth.Username, o.Auth.Password)
}

// classifyOCI wraps an error of package oci with the reason an operator
// can act on; others go to classify.
func classifyOCI(revision string, err error) error {
	reason := ReasonSourceUnavailable
	switch {
	case errors.Is(err, oci.ErrInvalidRef):
		reason = ReasonInvalidSpec
	case errors.Is(err, oci.ErrNotFound):
		reason = ReasonRevisionNotFound
	case errors.Is(err, oci.ErrLimitExceeded):
		reason = ReasonLimitExceeded
	case errors.Is(err, oci.ErrUnauthorized), errors.Is(err, oci.ErrPlainHTTP):
		reason = ReasonSourceUnavailable
	default:
		return classify(revision, err)
	}
	return &Error{Reason: reason, Revision: revision, Err: err}
}
