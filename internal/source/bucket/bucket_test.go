package bucket_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var limits = tree.Limits{MaxFiles: 100, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 16}

// A listing of a real S3 server's prefix digests its keys and ETags: the
// same objects list to the same digest with one LIST and no download; a
// changed object changes it; Fetch downloads the listed objects into a
// tree of paths relative to the prefix.
func TestAListingDigestsKeysAndETagsAndFetchReadsThem(t *testing.T) {
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "deploy")
	s3.Put(t, "deploy", map[string]string{"app/a.yaml": "kind: A", "app/nested/b.yaml": "kind: B", "other/c.yaml": "kind: C", "app/marker/": ""})
	requests := &testenv.S3Requests{}
	c := &bucket.Client{Transport: requests, AllowHTTP: true}
	loc := bucket.Location{Endpoint: s3.Endpoint, Bucket: "deploy", Prefix: "app", Insecure: true}
	auth := bucket.Auth{AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}
	ctx := context.Background()

	first, err := c.List(ctx, loc, auth, limits)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range first.Objects {
		keys = append(keys, o.Key)
	}
	if !cmp.Equal(keys, []string{"a.yaml", "nested/b.yaml"}) || !strings.HasPrefix(first.Digest, "sha256:") {
		t.Fatalf("listed %v digest %s; want a.yaml and nested/b.yaml (the folder marker left out), a sha256 digest", keys, first.Digest)
	}
	requests.Reset()
	again, err := c.List(ctx, loc, auth, limits)
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Reset(); again.Digest != first.Digest || !cmp.Equal(n, map[string]int{"LIST": 1}) {
		t.Errorf("an unchanged listing: %s (was %s) with requests %v; want the same digest, one LIST", again.Digest, first.Digest, n)
	}

	got, err := c.Fetch(ctx, loc, auth, first, limits)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := got.ReadFile("nested/b.yaml"); err != nil || string(data) != "kind: B" {
		t.Errorf("nested/b.yaml = %q, %v", data, err)
	}
	if n := requests.Reset(); n["GET"] != 2 {
		t.Errorf("Fetch asked %v; want 2 object downloads", n)
	}

	s3.Put(t, "deploy", map[string]string{"app/a.yaml": "kind: Z"}) // the same size
	changed, err := c.List(ctx, loc, auth, limits)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Digest == first.Digest {
		t.Error("a changed object left the digest as it was")
	}
	// The old listing's object is not the one there now.
	if _, err := c.Fetch(ctx, loc, auth, first, limits); !errors.Is(err, bucket.ErrChanged) {
		t.Errorf("fetching a listing whose object changed: %v; want ErrChanged", err)
	}
}

// What a bucket read refuses, and how each failure is told.
func TestABucketsFailuresAreToldApart(t *testing.T) {
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "deploy")
	s3.Put(t, "deploy", map[string]string{"a.yaml": "kind: A", "b.yaml": "kind: B", "big.yaml": strings.Repeat("x", 2048)})
	ctx := context.Background()
	c := &bucket.Client{AllowHTTP: true}
	loc := bucket.Location{Endpoint: s3.Endpoint, Bucket: "deploy", Insecure: true}
	auth := bucket.Auth{AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}
	for _, tc := range []struct {
		name   string
		client *bucket.Client
		loc    bucket.Location
		auth   bucket.Auth
		limits tree.Limits
		want   error
	}{
		{"a wrong secret", c, loc, bucket.Auth{AccessKey: s3.AccessKey, SecretKey: "wrong"}, limits, bucket.ErrUnauthorized},
		{"anonymous", c, loc, bucket.Auth{}, limits, bucket.ErrUnauthorized},
		{"no such bucket", c, bucket.Location{Endpoint: s3.Endpoint, Bucket: "missing", Insecure: true}, auth, limits, bucket.ErrNotFound},
		{"more objects than files", c, loc, auth, tree.Limits{MaxFiles: 2}, bucket.ErrLimitExceeded},
		{"an object over the file size", c, loc, auth, tree.Limits{MaxFileBytes: 1024}, bucket.ErrLimitExceeded},
		{"more bytes than the total", c, loc, auth, tree.Limits{MaxTotalBytes: 1024}, bucket.ErrLimitExceeded},
		{"plain HTTP not allowed", &bucket.Client{}, loc, auth, limits, bucket.ErrPlainHTTP},
		{"a bucket name too short", c, bucket.Location{Endpoint: s3.Endpoint, Bucket: "ab", Insecure: true}, auth, limits, bucket.ErrInvalidLocation},
		{"an endpoint with a scheme", c, bucket.Location{Endpoint: "http://" + s3.Endpoint, Bucket: "deploy", Insecure: true}, auth, limits, bucket.ErrInvalidLocation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.List(ctx, tc.loc, tc.auth, tc.limits)
			if !errors.Is(err, tc.want) {
				t.Errorf("%v; want %v", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), s3.SecretKey) {
				t.Errorf("the error shows the secret key: %v", err)
			}
		})
	}
	s3.Stop(t)
	if _, err := c.List(ctx, loc, auth, limits); err == nil {
		t.Error("a server that is down: no error")
	}
}
