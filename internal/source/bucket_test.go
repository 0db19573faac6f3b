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
