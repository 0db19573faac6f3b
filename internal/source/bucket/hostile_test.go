package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/tree"
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
