package helmrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

var (
	// ErrChartNotFound is a chart the index does not list, or a version
	// range no version of it is in.
	ErrChartNotFound = errors.New("chart not found")
	// ErrInvalidVersion is a version range that does not parse.
	ErrInvalidVersion = errors.New("invalid version range")
	// ErrDigestMismatch is an archive whose sha256 is not the index's.
	ErrDigestMismatch = errors.New("the chart archive does not match its digest in the index")
)

// Resolve picks the highest version of chart in versionRange, a semver
// range such as ">=1.2 <2" or an exact version; empty is the highest
// stable version (as `helm install` without --version). Versions that are
// not semver are passed over; pre-releases count only when the range
// names one, as Masterminds/semver (Helm's) decides.
func (i *Index) Resolve(chart, versionRange string) (ChartVersion, error) {
	if versionRange == "" {
		versionRange = "*"
	}
	constraint, err := semver.NewConstraint(versionRange)
	if err != nil {
		return ChartVersion{}, fmt.Errorf("%w: %q: %v", ErrInvalidVersion, versionRange, err)
	}
	versions, ok := i.Charts[chart]
	if !ok {
		return ChartVersion{}, fmt.Errorf("%w: the index lists no chart %q", ErrChartNotFound, chart)
	}
	var (
		best  *semver.Version
		found ChartVersion
	)
	for _, cv := range versions {
		v, err := semver.NewVersion(cv.Version)
		if err != nil || !constraint.Check(v) || len(cv.URLs) == 0 {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, found = v, cv
		}
	}
	if best == nil {
		return ChartVersion{}, fmt.Errorf("%w: no version of chart %q in the range %q (of %d listed)", ErrChartNotFound, chart, versionRange, len(versions))
	}
	return found, nil
}

// ArchiveURL is where cv's archive is: its first URL, resolved against the
// repository's URL when relative (as Helm does).
func ArchiveURL(repoURL string, cv ChartVersion) (string, error) {
	if len(cv.URLs) == 0 {
		return "", fmt.Errorf("%w: version %s lists no URL", ErrInvalidIndex, cv.Version)
	}
	base, err := url.Parse(strings.TrimSuffix(repoURL, "/") + "/")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	ref, err := url.Parse(cv.URLs[0])
	if err != nil {
		return "", fmt.Errorf("%w: the URL of version %s does not parse", ErrInvalidIndex, cv.Version)
	}
	return base.ResolveReference(ref).String(), nil
}

// Pulled is a chart archive downloaded and unpacked.
type Pulled struct {
	// Tree holds the archive's files (a folder named after the chart).
	Tree *tree.Tree
	// Digest is the archive's sha256, "sha256:<hex>".
	Digest string
}

// Pull downloads the archive of cv from the repository at repoURL and
// unpacks it within limits, reading at most maxBytes (0: no bound) of it.
// When the index gives a digest, an archive that does not match it is
// refused (ErrDigestMismatch) and nothing of it is returned. The
// credentials go only to the repository's own scheme, host and port: an
// index may send the archive's download anywhere, and there it is
// anonymous (as Helm does without --pass-credentials).
func (c *Client) Pull(ctx context.Context, repoURL string, cv ChartVersion, auth Auth, limits tree.Limits, maxBytes int64) (*Pulled, error) {
	archiveURL, err := ArchiveURL(repoURL, cv)
	if err != nil {
		return nil, err
	}
	resp, err := c.get(ctx, repoURL, archiveURL, auth, "the archive of version "+cv.Version)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	capped := &limitedReader{r: resp.Body, left: maxBytes}
	if maxBytes > 0 {
		body = capped
	}
	sum := sha256.New()
	hashed := io.TeeReader(body, sum)
	t, err := tree.FromTarGzip(hashed, limits)
	if err == nil {
		_, err = io.Copy(io.Discard, hashed) // the digest covers the whole archive
	}
	if capped.exceeded {
		return nil, fmt.Errorf("%w: the archive of version %s is larger than %d bytes", ErrLimitExceeded, cv.Version, maxBytes)
	}
	if errors.Is(err, tree.ErrDecompressionBudget) {
		return nil, fmt.Errorf("%w: the archive of version %s: %v", ErrLimitExceeded, cv.Version, err)
	}
	if err != nil {
		return nil, fmt.Errorf("unpacking the archive of version %s from %s: %w", cv.Version, redactURL(archiveURL), err)
	}
	digest := "sha256:" + hex.EncodeToString(sum.Sum(nil))
	if want := NormalDigest(cv.Digest); want != "" && want != digest {
		return nil, fmt.Errorf("%w: version %s from %s is %s, the index says %s", ErrDigestMismatch, cv.Version, redactURL(archiveURL), digest, want)
	}
	return &Pulled{Tree: t, Digest: digest}, nil
}

// NormalDigest is an index's digest of an archive as "sha256:<hex>" (the
// index gives the hex alone), or "" when it gives none.
func NormalDigest(digest string) string {
	digest = strings.ToLower(strings.TrimSpace(digest))
	if digest == "" {
		return ""
	}
	if !strings.HasPrefix(digest, "sha256:") {
		digest = "sha256:" + digest
	}
	return digest
}

// sameOrigin says whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return a != nil && b != nil && a.Scheme == b.Scheme && strings.EqualFold(a.Host, b.Host)
}

// get asks for a file of the repository at repoURL that its index names
// (an archive, its provenance) at fileURL: https:// only unless plain HTTP
// is allowed, no credentials in the URL, the account only to the
// repository's own origin. An answer but 200 is an error.
func (c *Client) get(ctx context.Context, repoURL, fileURL string, auth Auth, what string) (*http.Response, error) {
	if _, err := c.indexURL(repoURL); err != nil {
		return nil, err
	}
	u, err := url.Parse(fileURL)
	if err != nil || u.User != nil {
		return nil, fmt.Errorf("%w: the URL of %s must not hold credentials", ErrInvalidIndex, what)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && c.AllowHTTP:
	case u.Scheme == "http":
		return nil, &plainHTTPError{what: what + " at " + redactURL(fileURL)}
	default:
		return nil, fmt.Errorf("%w: %s is at %s, not an https:// URL", ErrInvalidIndex, what, redactURL(fileURL))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fileURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	if repo, _ := url.Parse(repoURL); sameOrigin(repo, u) && (auth.Username != "" || auth.Password != "") {
		req.SetBasicAuth(auth.Username, auth.Password)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		var plain *plainHTTPError
		if errors.As(err, &plain) {
			return nil, plain
		}
		return nil, fmt.Errorf("downloading %s: %w", redactURL(fileURL), err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return resp, nil
	case resp.StatusCode == http.StatusNotFound:
		err = fmt.Errorf("%w: %s (HTTP 404)", ErrNotFound, redactURL(fileURL))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		err = fmt.Errorf("%w: %s (HTTP %d)", ErrUnauthorized, redactURL(fileURL), resp.StatusCode)
	default:
		err = fmt.Errorf("downloading %s: HTTP %d", redactURL(fileURL), resp.StatusCode)
	}
	resp.Body.Close()
	return nil, &statusError{code: resp.StatusCode, err: err}
}

// statusError is an answer other than 200 to get, with its status code.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// answered reports whether err is an answer of one of codes.
func answered(err error, codes ...int) bool {
	var s *statusError
	return errors.As(err, &s) && slices.Contains(codes, s.code)
}
