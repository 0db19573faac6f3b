package source_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// The objects under a prefix of a real S3 server are read and rendered
// as a commit's files would be, recorded as sha256:<digest of the keys
// and ETags>; an unchanged read is one LIST and no download; a changed
// object is a new revision; another account is not served the render;
// an outage is SourceUnavailable; plain HTTP needs the controller's
// consent.
func TestABucketIsReadAndRenderedLikeACommit(t *testing.T) {
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "manifests")
	s3.Put(t, "manifests", map[string]string{
		"prod/a.yaml": configMap("a", "1"), "prod/nested/b.yaml": configMap("b", "1"), "staging/c.yaml": configMap("c", "1"),
	})
	requests := &testenv.S3Requests{}
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: requests, AllowInsecureRegistries: true})
	if err != nil {
		t.Fatal(err)
	}
	req := source.Request{Bucket: &source.BucketRequest{
		Location: bucket.Location{Endpoint: s3.Endpoint, Bucket: "manifests", Prefix: "prod", Insecure: true},
		Auth:     bucket.Auth{AccessKey: s3.AccessKey, SecretKey: s3.SecretKey},
	}}
	ctx := context.Background()

	first, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if rev := first.Revision.String(); !strings.HasPrefix(rev, "sha256:") || len(rev) != len("sha256:")+64 || !cmp.Equal(names(first), []string{"ConfigMap/a", "ConfigMap/b"}) {
		t.Fatalf("first read: %s %v; want sha256:<64 hex> and the two ConfigMaps under prod/", rev, names(first))
	}
	requests.Reset()
	second, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Reset(); !second.Cached || second.Revision != first.Revision || !cmp.Equal(n, map[string]int{"LIST": 1}) || r.Renders() != 1 {
		t.Errorf("an unchanged read: cached=%v %s with requests %v after %d renders; want one LIST, no download, 1 render", second.Cached, second.Revision, n, r.Renders())
	}

	other := req
	other.Bucket = &source.BucketRequest{Location: req.Bucket.Location, Auth: bucket.Auth{AccessKey: s3.AccessKey, SecretKey: "wrong"}}
	if _, err := r.Read(ctx, other); source.ReasonOf(err) != source.ReasonSourceUnavailable || !errors.Is(err, bucket.ErrUnauthorized) {
		t.Errorf("another account: %v (%s); want ErrUnauthorized (SourceUnavailable), not the cached render", err, source.ReasonOf(err))
	}

	missing := req
	missing.Bucket = &source.BucketRequest{Location: bucket.Location{Endpoint: s3.Endpoint, Bucket: "missing", Insecure: true}, Auth: req.Bucket.Auth}
	if _, err := r.Read(ctx, missing); source.ReasonOf(err) != source.ReasonRevisionNotFound {
		t.Errorf("a missing bucket: %v (%s); want RevisionNotFound", err, source.ReasonOf(err))
	}

	s3.Put(t, "manifests", map[string]string{"prod/a.yaml": configMap("a", "2")})
	third, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if third.Revision == first.Revision || third.Cached {
		t.Errorf("a changed object: %s cached=%v; want a new revision, rendered", third.Revision, third.Cached)
	}

	strict, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Read(ctx, req); !errors.Is(err, source.ErrInsecureBucket) || source.ReasonOf(err) != source.ReasonInvalidSpec {
		t.Errorf("plain HTTP without --allow-insecure-registries: %v (%s); want ErrInsecureBucket (InvalidSpec)", err, source.ReasonOf(err))
	}

	s3.Stop(t)
	if _, err := r.Read(ctx, req); source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("a server that is down: %v (%s); want SourceUnavailable", err, source.ReasonOf(err))
	}
}

// A bucket's render is cached per account: on a server that lets anyone
// list but only one account read, another account's read with the same
// listing is not served the render the first account's read made.
func TestABucketRenderIsNotServedToAnotherAccount(t *testing.T) {
	body := configMap("a", "1")
	s3 := testenv.StartScriptedS3(t, "manifests", "reader", []testenv.ScriptedObject{
		{Key: "prod/a.yaml", ETag: "e1", Size: int64(len(body)), Body: body}})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1, AllowInsecureRegistries: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(accessKey string) (*source.Result, error) {
		return r.Read(context.Background(), source.Request{Bucket: &source.BucketRequest{
			Location: bucket.Location{Endpoint: s3.Endpoint, Bucket: "manifests", Prefix: "prod", Insecure: true},
			Auth:     bucket.Auth{AccessKey: accessKey, SecretKey: "secret-of-" + accessKey}}})
	}
	if res, err := read("reader"); err != nil || !cmp.Equal(names(res), []string{"ConfigMap/a"}) {
		t.Fatalf("the reader's read: %v, %v", res, err)
	}
	if res, err := read("lister"); !errors.Is(err, bucket.ErrUnauthorized) {
		t.Errorf("an account that may list but not read: %v, %v; want ErrUnauthorized, not the cached render", res, err)
	}
	if res, err := read("reader"); err != nil || !res.Cached {
		t.Errorf("the reader's second read: %v, %v; want its cached render", res, err)
	}
}

// How a bucket read fails, by reason: an object that is not the listed one
// is SourceUnavailable and not remembered (the next read, once the server
// serves the listed object, succeeds); without insecure the client speaks
// only HTTPS, also to a plain-HTTP server.
func TestABucketReadFailsWithItsReason(t *testing.T) {
	body := configMap("a", "1")
	listed := testenv.ScriptedObject{Key: "a.yaml", ETag: "e1", Size: int64(len(body)), Body: body}
	changed := listed
	changed.ServedETag = "e2" // a server that ignores If-Match sends another object
	s3 := testenv.StartScriptedS3(t, "manifests", "", []testenv.ScriptedObject{changed})
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1, AllowInsecureRegistries: true})
	if err != nil {
		t.Fatal(err)
	}
	req := source.Request{Bucket: &source.BucketRequest{Location: bucket.Location{Endpoint: s3.Endpoint, Bucket: "manifests", Insecure: true}}}
	ctx := context.Background()
	if _, err := r.Read(ctx, req); !errors.Is(err, bucket.ErrChanged) || source.ReasonOf(err) != source.ReasonSourceUnavailable {
		t.Errorf("an object that is not the listed one: %v (%s); want ErrChanged (SourceUnavailable)", err, source.ReasonOf(err))
	}
	s3.SetObjects([]testenv.ScriptedObject{listed})
	if res, err := r.Read(ctx, req); err != nil || !cmp.Equal(names(res), []string{"ConfigMap/a"}) {
		t.Errorf("the next read, the object as listed: %v, %v; want it rendered", res, err)
	}
	gets := s3.GETs()
	secure := source.Request{Bucket: &source.BucketRequest{Location: bucket.Location{Endpoint: s3.Endpoint, Bucket: "manifests"}}}
	if _, err := r.Read(ctx, secure); err == nil || !strings.Contains(err.Error(), "HTTPS") || s3.GETs() != gets {
		t.Errorf("insecure: false against a plain-HTTP server: %v; want an HTTPS error and no download", err)
	}
}
