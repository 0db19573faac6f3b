package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var limits0 = tree.Limits{MaxFiles: 2000}

// A hostile S3 server gets LimitExceeded and bounded work: one that pages
// a listing on forever with no key, and one whose page never ends; a
// redirect to another host is not followed.
func TestAHostileServerGetsLimitExceeded(t *testing.T) {
	var pages atomic.Int64
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := pages.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>`+
			`<NextContinuationToken>t%d</NextContinuationToken><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys></ListBucketResult>`, n)
	}))
	defer endless.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>`)
		chunk := strings.Repeat("b", 1<<16)
		for i := 0; i < 1<<12; i++ { // 256 MiB, unless the client stops reading
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
	}))
	defer huge.Close()

	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()

	c := &bucket.Client{AllowHTTP: true, MaxResponseBytes: 1 << 20}
	if _, err := c.List(context.Background(), bucket.Location{Endpoint: strings.TrimPrefix(redirecting.URL, "http://"), Bucket: "bkt", Insecure: true},
		bucket.Auth{AccessKey: "a", SecretKey: "s"}, limits0); err == nil || elsewhere.Load() != 0 {
		t.Errorf("a redirect to another host: %v, with %d requests there; want an error and none", err, elsewhere.Load())
	}
	limits := limits0
	for _, tc := range []struct {
		name, endpoint string
	}{
		{"endless pages", strings.TrimPrefix(endless.URL, "http://")},
		{"an endless page", strings.TrimPrefix(huge.URL, "http://")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.List(context.Background(), bucket.Location{Endpoint: tc.endpoint, Bucket: "bkt", Insecure: true}, bucket.Auth{}, limits)
			t.Log(err)
			if !errors.Is(err, bucket.ErrLimitExceeded) {
				t.Errorf("%v; want ErrLimitExceeded", err)
			}
		})
	}
	if n := pages.Load(); n > 5 {
		t.Errorf("the endless listing was asked %d pages; want at most 2000/1000+3", n)
	}
}

// A listing that cannot be one folder's files is refused by List, before
// any download, with ErrInvalidListing (or ErrLimitExceeded for keys and
// ETags longer than S3 allows).
func TestAListingThatIsNotAFolderIsRefused(t *testing.T) {
	ok := func(key string) testenv.ScriptedObject {
		return testenv.ScriptedObject{Key: key, ETag: "e1", Size: 2, Body: "a\n"}
	}
	for _, tc := range []struct {
		name    string
		objects []testenv.ScriptedObject
		want    error
	}{
		{"a key that leaves the folder", []testenv.ScriptedObject{ok("p/../x.yaml")}, bucket.ErrInvalidListing},
		{"a key outside the prefix", []testenv.ScriptedObject{ok("p/a.yaml"), ok("q/b.yaml")}, bucket.ErrInvalidListing},
		{"a key that is a file and a folder", []testenv.ScriptedObject{ok("p/a"), ok("p/a/b.yaml")}, bucket.ErrInvalidListing},
		{"two keys for one path", []testenv.ScriptedObject{ok("p/x//y.yaml"), ok("p/x/y.yaml")}, bucket.ErrInvalidListing},
		{"an absolute key", []testenv.ScriptedObject{ok("p//etc/passwd")}, bucket.ErrInvalidListing},
		{"a negative size", []testenv.ScriptedObject{{Key: "p/a.yaml", ETag: "e1", Size: -1 << 20}}, bucket.ErrInvalidListing},
		{"no ETag", []testenv.ScriptedObject{{Key: "p/a.yaml", Size: 2, Body: "a\n"}}, bucket.ErrInvalidListing},
		{"a key longer than S3 allows", []testenv.ScriptedObject{ok("p/" + strings.Repeat("k", 2048))}, bucket.ErrLimitExceeded},
		{"an ETag longer than S3 allows", []testenv.ScriptedObject{{Key: "p/a.yaml", ETag: strings.Repeat("e", 4096), Size: 2}}, bucket.ErrLimitExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3 := testenv.StartScriptedS3(t, "bkt", "", tc.objects)
			c := &bucket.Client{AllowHTTP: true}
			_, err := c.List(context.Background(), bucket.Location{Endpoint: s3.Endpoint, Bucket: "bkt", Prefix: "p", Insecure: true}, bucket.Auth{}, limits0)
			if !errors.Is(err, tc.want) {
				t.Errorf("%v; want %v", err, tc.want)
			}
			if n := s3.GETs(); n != 0 {
				t.Errorf("%d objects downloaded; want none", n)
			}
		})
	}
}

// An object is taken only as listed: a server that ignores If-Match and
// sends another object of the same size gets ErrChanged. A download is
// bounded by its listed size, not by the cap on other answers.
func TestADownloadIsTheListedObject(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	s3 := testenv.StartScriptedS3(t, "bkt", "", []testenv.ScriptedObject{{Key: "a.yaml", ETag: "e1", Size: int64(len(big)), Body: big}})
	c := &bucket.Client{AllowHTTP: true, MaxResponseBytes: 1 << 20}
	loc := bucket.Location{Endpoint: s3.Endpoint, Bucket: "bkt", Insecure: true}
	limits := tree.Limits{MaxFiles: 10, MaxFileBytes: 4 << 20, MaxTotalBytes: 4 << 20}
	listing, err := c.List(context.Background(), loc, bucket.Auth{}, limits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(context.Background(), loc, bucket.Auth{}, listing, limits); err != nil {
		t.Errorf("an object of 2 MiB with answers capped at 1 MiB: %v", err)
	}
	s3.SetObjects([]testenv.ScriptedObject{{Key: "a.yaml", ETag: "e1", Size: int64(len(big)), Body: strings.Repeat("y", len(big)), ServedETag: "e2"}})
	if _, err := c.Fetch(context.Background(), loc, bucket.Auth{}, listing, limits); !errors.Is(err, bucket.ErrChanged) {
		t.Errorf("a server that ignores If-Match: %v; want ErrChanged", err)
	}
}

// A listing left early (a limit met, a key refused) leaves nothing
// running: the page the server sent is not held by a goroutine that
// waits for a reader that is gone.
func TestAListingLeftEarlyLeavesNoGoroutine(t *testing.T) {
	objects := make([]testenv.ScriptedObject, 10)
	for i := range objects {
		objects[i] = testenv.ScriptedObject{Key: fmt.Sprintf("p/%02d.yaml", i), ETag: "e1", Size: 2, Body: "a\n"}
	}
	s3 := testenv.StartScriptedS3(t, "bkt", "", objects)
	c := &bucket.Client{AllowHTTP: true}
	loc := bucket.Location{Endpoint: s3.Endpoint, Bucket: "bkt", Prefix: "p", Insecure: true}
	if _, err := c.List(context.Background(), loc, bucket.Auth{}, limits0); err != nil {
		t.Fatal(err) // the client and its connections exist before the count
	}
	before := runtime.NumGoroutine()
	for range 50 {
		if _, err := c.List(context.Background(), loc, bucket.Auth{}, tree.Limits{MaxFiles: 3}); !errors.Is(err, bucket.ErrLimitExceeded) {
			t.Fatalf("a listing of 10 objects with MaxFiles 3: %v, want ErrLimitExceeded", err)
		}
	}
	// Goroutines that end do so at once; poll until they have, or fail
	// with the count that stayed.
	var after int
	for range 200 {
		if after = runtime.NumGoroutine(); after <= before+2 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%d goroutines before 50 listings left early, %d after: they leak", before, after)
}
