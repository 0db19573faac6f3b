package oci_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// push writes a random image to repo:tag and returns its manifest digest.
func push(t *testing.T, r *testenv.Registry, repo, tag string) v1.Hash {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(r.Host + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password})); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

func TestAReferenceResolvesWithOneManifestHEAD(t *testing.T) {
	r := testenv.StartRegistry(t)
	v1Digest := push(t, r, "plumb/app", "v1")
	url := oci.Scheme + r.Host + "/plumb/app"
	requests := &testenv.RegistryRequests{}
	c := &oci.Client{Transport: requests, AllowHTTP: true}
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	ctx := context.Background()

	rev, err := c.Resolve(ctx, url, oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1@" + v1Digest.String(); rev.String() != want {
		t.Errorf("revision %s, want %s", rev, want)
	}
	got := requests.Reset()
	t.Logf("the requests of the first resolve (it authenticates): %v", got)
	if got["HEAD manifests"] != 1 || got["GET manifests"] != 0 || got["GET blobs"]+got["HEAD blobs"] != 0 {
		t.Errorf("requests %v, want one manifest HEAD and no manifest GET or blob", got)
	}

	// The next tick's check, unchanged: one request, the manifest HEAD.
	if again, err := c.Resolve(ctx, url, oci.Ref{Tag: "v1"}, auth); err != nil || again != rev {
		t.Fatalf("resolved again: %s, %v; want %s", again, err, rev)
	}
	if got := requests.Reset(); len(got) != 1 || got["HEAD manifests"] != 1 {
		t.Errorf("an unchanged check made %v, want one manifest HEAD and nothing else", got)
	}
	v2 := push(t, r, "plumb/app", "v1") // the tag moves
	if moved, err := c.Resolve(ctx, url, oci.Ref{Tag: "v1"}, auth); err != nil || moved.Digest != v2.String() {
		t.Errorf("after the tag moved: %s, %v; want v1@%s", moved, err, v2)
	}
	requests.Reset()

	rev, err = c.Resolve(ctx, url, oci.Ref{Digest: v1Digest.String()}, auth) // still in the registry, untagged
	if err != nil || rev.String() != v1Digest.String() {
		t.Errorf("by digest: %s, %v; want %s", rev, err, v1Digest)
	}
	if got := requests.Reset(); got["HEAD manifests"] != 1 || got["GET blobs"] != 0 {
		t.Errorf("by digest, requests %v, want one manifest HEAD", got)
	}
}

func TestASemverRangeFollowsTheHighestTagInIt(t *testing.T) {
	r := testenv.StartRegistry(t)
	for _, tag := range []string{"1.0.0", "1.2.0", "2.0.0", "latest", "not-semver"} {
		push(t, r, "plumb/chart", tag)
	}
	url := oci.Scheme + r.Host + "/plumb/chart"
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	requests := &testenv.RegistryRequests{}
	c := &oci.Client{Transport: requests, AllowHTTP: true, Now: func() time.Time { return clock }}
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	ctx := context.Background()
	rev, err := c.Resolve(ctx, url, oci.Ref{SemVer: ">=1.0.0 <2.0.0"}, auth)
	if err != nil || rev.Tag != "1.2.0" {
		t.Fatalf("resolved %s, %v; want 1.2.0", rev, err)
	}
	if got := requests.Reset(); got["GET tags"] != 1 {
		t.Errorf("the first resolve listed the tags %d times, want once: %v", got["GET tags"], got)
	}

	// A second App with the same account, within TagsMaxAge: the listing
	// is shared, and the check is one manifest HEAD.
	if again, err := c.Resolve(ctx, url, oci.Ref{SemVer: "1.x"}, auth); err != nil || again != rev {
		t.Fatalf("another App's resolve: %s, %v; want %s", again, err, rev)
	}
	if got := requests.Reset(); len(got) != 1 || got["HEAD manifests"] != 1 {
		t.Errorf("a resolve within TagsMaxAge made %v, want one manifest HEAD and no listing", got)
	}
	// Another account is not served that listing.
	if _, err := c.Resolve(ctx, url, oci.Ref{SemVer: "1.x"}, oci.Auth{Username: r.Username, Password: "wrong-password"}); !errors.Is(err, oci.ErrUnauthorized) {
		t.Errorf("another account's resolve: %v, want ErrUnauthorized", err)
	}

	newer := push(t, r, "plumb/chart", "1.3.0")
	clock = clock.Add(oci.DefaultTagsMaxAge)
	requests.Reset()
	rev, err = c.Resolve(ctx, url, oci.Ref{SemVer: ">=1.0.0 <2.0.0"}, auth)
	if err != nil || rev.String() != "1.3.0@"+newer.String() {
		t.Errorf("after 1.3.0 was pushed and the listing aged: %s, %v; want 1.3.0@%s", rev, err, newer)
	}
	if got := requests.Reset(); got["GET tags"] != 1 || got["HEAD manifests"] != 1 {
		t.Errorf("an aged listing: %v, want one listing and one manifest HEAD", got)
	}
	// A tag pushed within TagsMaxAge: a plain resolve keeps the listing,
	// a fresh one (a push webhook asked for it) lists again and sees it.
	newest := push(t, r, "plumb/chart", "1.4.0")
	if rev, err := c.Resolve(ctx, url, oci.Ref{SemVer: "1.x"}, auth); err != nil || rev.Tag != "1.3.0" {
		t.Errorf("within TagsMaxAge: %s, %v; want the listed 1.3.0", rev, err)
	}
	requests.Reset()
	if rev, err := c.ResolveFresh(time.Time{})(ctx, url, oci.Ref{SemVer: "1.x"}, auth); err != nil || rev.String() != "1.4.0@"+newest.String() {
		t.Errorf("a fresh resolve: %s, %v; want 1.4.0@%s", rev, err, newest)
	}
	if got := requests.Reset(); got["GET tags"] != 1 || got["HEAD manifests"] != 1 {
		t.Errorf("a fresh resolve: %v, want one listing and one manifest HEAD", got)
	}
	// A chart version with build metadata is pushed with "_" for "+";
	// of an artifact's tags, one with "_" is no version.
	build := push(t, r, "plumb/chart", "1.4.1_build.7")
	if rev, err := c.ResolveFresh(time.Time{})(ctx, url, oci.Ref{SemVer: "1.x"}, auth); err != nil || rev.Tag != "1.4.0" {
		t.Errorf("an artifact's tag with _: %s, %v; want 1.4.0, not 1.4.1_build.7", rev, err)
	}
	if rev, err := c.Resolve(ctx, url, oci.ChartRef("1.x"), auth); err != nil || rev.String() != "1.4.1_build.7@"+build.String() {
		t.Errorf("a chart tag with build metadata: %s, %v; want 1.4.1_build.7@%s", rev, err, build)
	}
	// Versions that differ only in build metadata: the lowest tag in byte
	// order, whatever the listing's order.
	push(t, r, "plumb/chart", "1.4.1_build.1")
	if rev, err := c.ResolveFresh(time.Time{})(ctx, url, oci.ChartRef("1.x"), auth); err != nil || rev.Tag != "1.4.1_build.1" {
		t.Errorf("two tags of one precedence: %s, %v; want 1.4.1_build.1", rev, err)
	}
	if _, err := c.Resolve(ctx, url, oci.Ref{SemVer: ">=3.0.0"}, auth); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("a range no tag satisfies: %v, want ErrNotFound", err)
	}
}

func TestABadReferenceOrAccountIsToldApart(t *testing.T) {
	r := testenv.StartRegistry(t)
	push(t, r, "plumb/app", "v1")
	url := oci.Scheme + r.Host + "/plumb/app"
	auth := oci.Auth{Username: r.Username, Password: r.Password}
	ctx := context.Background()
	// The cases share one Client, and the first opens a session with the
	// right account: a session serves no other account.
	allowed := &oci.Client{AllowHTTP: true}
	for _, tc := range []struct {
		name   string
		client *oci.Client
		url    string
		ref    oci.Ref
		auth   oci.Auth
		want   error
	}{
		{"a missing tag", allowed, url, oci.Ref{Tag: "v9"}, auth, oci.ErrNotFound},
		{"a missing digest", allowed, url, oci.Ref{Digest: "sha256:" + strings.Repeat("0", 64)}, auth, oci.ErrNotFound},
		{"a wrong password", allowed, url, oci.Ref{Tag: "v1"}, oci.Auth{Username: r.Username, Password: "wrong-password"}, oci.ErrUnauthorized},
		{"no account", allowed, url, oci.Ref{Tag: "v1"}, oci.Auth{}, oci.ErrUnauthorized},
		{"two references", allowed, url, oci.Ref{Tag: "v1", SemVer: "1.x"}, auth, oci.ErrInvalidRef},
		{"a malformed range", allowed, url, oci.Ref{SemVer: ">=>1"}, auth, oci.ErrInvalidRef},
		{"not an oci:// URL", allowed, "https://" + r.Host + "/plumb/app", oci.Ref{Tag: "v1"}, auth, oci.ErrInvalidRef},
		{"credentials in the URL", allowed, oci.Scheme + "user:pw@" + r.Host + "/plumb/app", oci.Ref{Tag: "v1"}, auth, oci.ErrInvalidRef},
		{"a host Docker Hub would take for a namespace", allowed, oci.Scheme + "zot/org/app", oci.Ref{Tag: "v1"}, auth, oci.ErrInvalidRef},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.Resolve(ctx, tc.url, tc.ref, tc.auth)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), r.Password) || strings.Contains(err.Error(), "wrong-password") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
}

// Without AllowHTTP every request is HTTPS, also to a loopback or private
// host, for which go-containerregistry would pick plain HTTP: the plain
// HTTP test registry cannot be read.
func TestASecureClientSpeaksOnlyHTTPS(t *testing.T) {
	r := testenv.StartRegistry(t)
	push(t, r, "plumb/app", "v1")
	_, err := (&oci.Client{}).Resolve(context.Background(), oci.Scheme+r.Host+"/plumb/app", oci.Ref{Tag: "v1"}, oci.Auth{Username: r.Username, Password: r.Password})
	if !errors.Is(err, oci.ErrPlainHTTP) || !strings.Contains(err.Error(), "oci.insecure") {
		t.Errorf("a secure client reading a plain HTTP registry: %v, want ErrPlainHTTP naming oci.insecure", err)
	}
	// Docker Hub's short host is kept as go-containerregistry's own.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&oci.Client{}).Resolve(ctx, oci.Scheme+"docker.io/library/app", oci.Ref{Tag: "v1"}, oci.Auth{}); errors.Is(err, oci.ErrInvalidRef) {
		t.Errorf("oci://docker.io/library/app: %v, want it taken", err)
	}
}
