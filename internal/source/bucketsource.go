package source

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// BucketRequest names the objects under a prefix of an S3-compatible
// bucket, read in place of a Git repository.
type BucketRequest struct {
	// Location is the endpoint, bucket, prefix and region; Insecure asks
	// for plain HTTP, which the Reader refuses unless its Options allow
	// insecure registries.
	Location bucket.Location
	// Auth is the access key pair from the App's Secret.
	Auth bucket.Auth
}

// ErrInsecureBucket is a request for a bucket over plain HTTP that the
// controller does not allow.
var ErrInsecureBucket = errors.New("bucket.insecure asks for plain HTTP, which this controller refuses (it runs without --allow-insecure-registries)")

// readBucket lists the prefix with one LIST (a page per 1,000 objects)
// and, unless the render of that listing's digest is cached for the same
// location and account, downloads the listed objects and renders the
// folder as a Git commit's would be. The revision is sha256:<digest of
// the keys and ETags>, as Flux records a Bucket's.
func (r *Reader) readBucket(ctx context.Context, req Request) (*Result, error) {
	b := req.Bucket
	buckets := r.buckets
	if b.Location.Insecure {
		if r.insecureBuckets == nil {
			return nil, &Error{Reason: ReasonInvalidSpec, Err: ErrInsecureBucket}
		}
		buckets = r.insecureBuckets
	}
	listing, err := buckets.List(ctx, b.Location, b.Auth, r.treeLimits())
	if err != nil {
		return nil, classifyBucket("", err)
	}
	recorded := revision.Revision{Digest: listing.Digest}
	return r.readContent(ctx, &req, content{
		origin: bucketOrigin(b), id: listing.Digest, revision: recorded,
		tree: func(ctx context.Context) (*tree.Tree, error) {
			t, err := buckets.Fetch(ctx, b.Location, b.Auth, listing, r.treeLimits())
			if err != nil {
				return nil, classifyBucket(recorded.String(), err)
			}
			return t, nil
		},
	})
}

// bucketOrigin keys a bucket's renders by its endpoint, the way it is
// reached, the bucket, the prefix and a digest of the account that
// proved access.
func bucketOrigin(b *BucketRequest) string {
	l := b.Location
	return "bucket\x00" + partsDigest(strings.ToLower(l.Endpoint), fmt.Sprint(l.Insecure), l.Region, l.Bucket,
		strings.Trim(l.Prefix, "/"), b.Auth.AccessKey, b.Auth.SecretKey)
}

// classifyBucket wraps an error of package bucket with the reason an
// operator can act on; others go to classify.
func classifyBucket(revision string, err error) error {
	reason := ReasonSourceUnavailable
	retry := false
	switch {
	case errors.Is(err, bucket.ErrInvalidLocation):
		reason = ReasonInvalidSpec
	case errors.Is(err, bucket.ErrNotFound):
		reason = ReasonRevisionNotFound
	case errors.Is(err, bucket.ErrLimitExceeded):
		reason = ReasonLimitExceeded
	case errors.Is(err, bucket.ErrInvalidListing):
		reason = ReasonInvalidManifest
	case errors.Is(err, bucket.ErrChanged), errors.Is(err, bucket.ErrUnauthorized):
		retry = true
	case errors.Is(err, bucket.ErrPlainHTTP):
		reason = ReasonInvalidSpec
	default:
		return classify(revision, err)
	}
	return &Error{Reason: reason, Revision: revision, Err: err, retry: retry}
}
