// Package bucket reads the objects of an S3-compatible bucket under a
// prefix: a listing of keys and ETags that digests to a revision (the
// unchanged check, with no object downloaded), and the objects of a
// listing as a tree, within limits. It speaks S3 through minio-go.
package bucket

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"k8s.io/utils/lru"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

var (
	// ErrInvalidLocation is an endpoint or bucket name that is not one.
	ErrInvalidLocation = errors.New("invalid bucket location")
	// ErrNotFound is a bucket that does not exist.
	ErrNotFound = errors.New("bucket not found")
	// ErrUnauthorized is a bucket the account may not list or read.
	ErrUnauthorized = errors.New("access to the bucket denied")
	// ErrLimitExceeded is a listing or an object past the read limits.
	ErrLimitExceeded = errors.New("bucket read limit exceeded")
	// ErrPlainHTTP is a plain HTTP endpoint that the client does not allow.
	ErrPlainHTTP = errors.New("the bucket is read over plain HTTP, which is not allowed")
	// ErrInvalidListing is a listing that cannot be read as files: a key
	// outside the prefix or the folder, two keys for one path, a key both
	// a file and a folder, a negative size, no ETag.
	ErrInvalidListing = errors.New("the bucket's listing cannot be read as files")
	// ErrChanged is an object that changed between the listing and its
	// download (the next read lists it again).
	ErrChanged = errors.New("an object changed while the bucket was read")
)

// Location names the objects to read.
type Location struct {
	// Endpoint is the S3 server, host[:port] (no scheme).
	Endpoint string
	// Bucket is the bucket's name.
	Bucket string
	// Prefix is the folder of the bucket to read ("" for all of it).
	Prefix string
	// Region is the bucket's region; empty is us-east-1 (never asked of
	// the server, which would cost a request).
	Region string
	// Insecure reads the endpoint over plain HTTP.
	Insecure bool
}

// Auth is an access key pair; zero reads anonymously.
type Auth struct {
	AccessKey, SecretKey string
}

// Object is one listed object.
type Object struct {
	// Key is the object's key, relative to the prefix.
	Key  string
	ETag string
	Size int64
}

// Listing is the objects under a prefix, sorted by key.
type Listing struct {
	Objects []Object
	// Digest is "sha256:<hex>" of the keys and ETags.
	Digest string
}

// clientsKept bounds the S3 clients kept, one per endpoint and account.
const clientsKept = 256

// Client reads buckets. Its zero value reads over HTTPS with
// http.DefaultTransport's settings.
type Client struct {
	// Transport carries the requests (nil: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// AllowHTTP lets a Location be read over plain HTTP.
	AllowHTTP bool
	// MaxResponseBytes bounds the body of one answer, a page of a listing
	// included (0: 16 MiB); an object's download is bounded by its listed
	// size.
	MaxResponseBytes int64

	once    sync.Once
	clients *lru.Cache // key → *minio.Client
}

// s3 is the client for loc's endpoint and auth, shared by every read with
// the same ones.
func (c *Client) s3(loc Location, auth Auth) (*minio.Client, error) {
	if loc.Insecure && !c.AllowHTTP {
		return nil, ErrPlainHTTP
	}
	if loc.Endpoint == "" || strings.Contains(loc.Endpoint, "/") || strings.ContainsAny(loc.Endpoint, "@ ") {
		return nil, fmt.Errorf("%w: endpoint %q must be host[:port], without a scheme or path", ErrInvalidLocation, loc.Endpoint)
	}
	if err := s3utils.CheckValidBucketName(loc.Bucket); err != nil {
		return nil, fmt.Errorf("%w: bucket name %q: %v", ErrInvalidLocation, loc.Bucket, err)
	}
	c.once.Do(func() { c.clients = lru.New(clientsKept) })
	region := loc.Region
	if region == "" {
		region = "us-east-1"
	}
	// %q quotes every part, so that no two locations and accounts join
	// alike; the digest keeps no copy of the secret.
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprintf("%q %t %q %q %q", loc.Endpoint, loc.Insecure, region, auth.AccessKey, auth.SecretKey))))
	if client, ok := c.clients.Get(key); ok {
		return client.(*minio.Client), nil
	}
	creds := credentials.NewStaticV4(auth.AccessKey, auth.SecretKey, "") // anonymous when both are empty
	transport := c.Transport
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	maxBody := c.MaxResponseBytes
	if maxBody <= 0 {
		maxBody = 16 << 20
	}
	client, err := minio.New(loc.Endpoint, &minio.Options{Creds: creds, Secure: !loc.Insecure, Transport: &guarded{next: transport, maxBody: maxBody},
		Region: region, BucketLookup: minio.BucketLookupPath, MaxRetries: 1})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidLocation, err)
	}
	c.clients.Add(key, client)
	return client, nil
}

// prefixFolder is the prefix as a folder: "" or "<path>/".
func prefixFolder(prefix string) string {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return ""
	}
	return prefix + "/"
}

// S3's own bounds on what a listing may hold: a hostile server's longer
// keys or ETags get ErrLimitExceeded.
const (
	maxKeyBytes  = 1024
	maxETagBytes = 256
)

// List lists the objects under loc's prefix, at most limits.MaxFiles of
// them and limits.MaxTotalBytes in all, each at most limits.MaxFileBytes
// (listed sizes), so that an endless listing stops at the first object
// past them. Folder markers (keys ending in "/") are left out. A listing
// whose keys are not files of one folder under the prefix (see
// ErrInvalidListing) is refused before anything is downloaded.
func (c *Client) List(ctx context.Context, loc Location, auth Auth, limits tree.Limits) (Listing, error) {
	client, err := c.s3(loc, auth)
	if err != nil {
		return Listing{}, err
	}
	// A page holds up to 1,000 keys: a server that pages on with few or
	// none runs out of requests.
	pages := int64(1000)
	if limits.MaxFiles > 0 {
		pages = int64(limits.MaxFiles/1000) + 3
	}
	ctx = withRequests(ctx, pages)
	prefix := prefixFolder(loc.Prefix)
	var (
		objects []Object
		total   int64
	)
	paths := tree.NewBuilder(tree.Limits{}, nil) // the keys as a folder's paths: conflicts and escapes
	// The iterator runs in this goroutine, page by page: leaving the loop
	// early leaves nothing behind (ListObjects' channel would keep a
	// goroutine, and its page, waiting for a reader that is gone).
	for info := range client.ListObjectsIter(ctx, loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if info.Err != nil {
			return Listing{}, classify(info.Err, "listing")
		}
		if len(info.Key) > maxKeyBytes {
			return Listing{}, fmt.Errorf("%w: a key of %d bytes, more than %d", ErrLimitExceeded, len(info.Key), maxKeyBytes)
		}
		key, under := strings.CutPrefix(info.Key, prefix)
		if !under {
			return Listing{}, fmt.Errorf("%w: key %q is not under the prefix %q", ErrInvalidListing, info.Key, prefix)
		}
		if key == "" || strings.HasSuffix(key, "/") {
			continue
		}
		etag := strings.Trim(info.ETag, `"`)
		switch {
		case len(etag) > maxETagBytes:
			return Listing{}, fmt.Errorf("%w: object %s has an ETag of %d bytes, more than %d", ErrLimitExceeded, key, len(etag), maxETagBytes)
		case etag == "":
			return Listing{}, fmt.Errorf("%w: the server lists no ETag for %s", ErrInvalidListing, key)
		case info.Size < 0:
			return Listing{}, fmt.Errorf("%w: object %s is listed with %d bytes", ErrInvalidListing, key, info.Size)
		}
		if err := paths.AddFile(key, 0, key); err != nil {
			return Listing{}, fmt.Errorf("%w: %v", ErrInvalidListing, err)
		}
		if max := limits.MaxFiles; max > 0 && len(objects)+1 > max {
			return Listing{}, fmt.Errorf("%w: more than %d objects under the prefix", ErrLimitExceeded, max)
		}
		if max := limits.MaxFileBytes; max > 0 && info.Size > max {
			return Listing{}, fmt.Errorf("%w: object %s is %d bytes, more than %d", ErrLimitExceeded, key, info.Size, max)
		}
		if total += info.Size; limits.MaxTotalBytes > 0 && total > limits.MaxTotalBytes {
			return Listing{}, fmt.Errorf("%w: the objects under the prefix are more than %d bytes", ErrLimitExceeded, limits.MaxTotalBytes)
		}
		objects = append(objects, Object{Key: key, ETag: etag, Size: info.Size})
	}
	if err := ctx.Err(); err != nil {
		return Listing{}, err
	}
	sort.Slice(objects, func(i, j int) bool { return objects[i].Key < objects[j].Key })
	return Listing{Objects: objects, Digest: digest(objects)}, nil
}

// digest digests keys and ETags, each length-prefixed so that no two
// listings digest alike.
func digest(objects []Object) string {
	h := sha256.New()
	for _, o := range objects {
		for _, part := range []string{o.Key, o.ETag} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
			h.Write([]byte(part))
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Fetch downloads the objects of a listing into a tree (their keys its
// paths) within limits. An object whose ETag or size is no longer the
// listed one fails with ErrChanged, so that a tree is always the
// listing's.
func (c *Client) Fetch(ctx context.Context, loc Location, auth Auth, listing Listing, limits tree.Limits) (*tree.Tree, error) {
	client, err := c.s3(loc, auth)
	if err != nil {
		return nil, err
	}
	prefix := prefixFolder(loc.Prefix)
	contents := make(map[string][]byte, len(listing.Objects))
	b := tree.NewBuilder(limits, func(key string) ([]byte, error) {
		if data, ok := contents[key]; ok {
			return data, nil
		}
		return nil, fmt.Errorf("%s: not downloaded", key)
	})
	for _, o := range listing.Objects { // every path first: nothing is downloaded for a tree that cannot be
		if err := b.AddFile(o.Key, o.Size, o.Key); err != nil {
			return nil, err
		}
	}
	ctx = context.WithValue(ctx, downloadKey{}, true)
	for _, o := range listing.Objects {
		data, err := c.download(ctx, client, loc.Bucket, prefix+o.Key, o)
		if err != nil {
			return nil, err
		}
		contents[o.Key] = data
	}
	return b.Build(), nil
}

// download reads one object, if it is still the listed one.
func (c *Client) download(ctx context.Context, client *minio.Client, bucket, key string, o Object) ([]byte, error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetMatchETag(o.ETag); err != nil {
		return nil, fmt.Errorf("%w: object %s: %v", ErrChanged, o.Key, err)
	}
	obj, err := client.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return nil, classify(err, "downloading "+o.Key)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, o.Size+1))
	if err != nil {
		var resp minio.ErrorResponse
		if errors.As(err, &resp) && resp.StatusCode == http.StatusPreconditionFailed {
			return nil, fmt.Errorf("%w: object %s", ErrChanged, o.Key)
		}
		return nil, classify(err, "downloading "+o.Key)
	}
	if int64(len(data)) != o.Size {
		return nil, fmt.Errorf("%w: object %s is no longer %d bytes", ErrChanged, o.Key, o.Size)
	}
	// A server that ignored If-Match still says what it sent.
	if info, err := obj.Stat(); err != nil || strings.Trim(info.ETag, `"`) != o.ETag {
		return nil, fmt.Errorf("%w: object %s is not the listed one (ETag %q)", ErrChanged, o.Key, o.ETag)
	}
	return data, nil
}

var (
	errRequests     = errors.New("the listing asked more pages than its objects may fill")
	errResponseSize = errors.New("an answer of the S3 server is larger than allowed")
)

type requestsKey struct{}

// downloadKey marks a download's requests, which download bounds to the
// listed size: the cap on other answers does not apply to them.
type downloadKey struct{}

// withRequests bounds the requests made with ctx.
func withRequests(ctx context.Context, n int64) context.Context {
	left := &atomic.Int64{}
	left.Store(n)
	return context.WithValue(ctx, requestsKey{}, left)
}

// guarded sends requests within their context's budget and bounds the
// bodies of the answers.
type guarded struct {
	next    http.RoundTripper
	maxBody int64
}

func (g *guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	if left, ok := req.Context().Value(requestsKey{}).(*atomic.Int64); ok && left.Add(-1) < 0 {
		return nil, errRequests
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if req.Context().Value(downloadKey{}) == nil {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: g.maxBody}
	}
	return resp, nil
}

// cappedBody fails a read past its bound.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var probe [1]byte
		if n, err := b.ReadCloser.Read(probe[:]); n == 0 && err != nil {
			return 0, err // the body ended at the bound
		}
		return 0, errResponseSize
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// classify wraps an S3 error with the package's error an operator acts
// on; the server's message is cut short, and no key or secret is in it.
func classify(err error, doing string) error {
	for _, limit := range []error{errRequests, errResponseSize} {
		if errors.Is(err, limit) {
			return fmt.Errorf("%w: %s: %v", ErrLimitExceeded, doing, limit)
		}
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch {
		case resp.StatusCode == http.StatusNotFound && resp.Code == "NoSuchBucket":
			return fmt.Errorf("%w (%s: NoSuchBucket)", ErrNotFound, doing)
		case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("%w (%s: HTTP %d %s)", ErrUnauthorized, doing, resp.StatusCode, cut(resp.Code))
		case resp.StatusCode == http.StatusPreconditionFailed:
			return fmt.Errorf("%w (%s)", ErrChanged, doing)
		}
		return fmt.Errorf("%s: HTTP %d %s", doing, resp.StatusCode, cut(resp.Code))
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// cut bounds a server-given text.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
