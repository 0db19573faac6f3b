package testenv

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/apimachinery/pkg/util/wait"
)

// S3 is a real S3 server: Versity's gateway (versitygw, which hack/tools.sh
// builds into the user cache) on its POSIX backend, over plain HTTP on a
// loopback port, with one root account.
type S3 struct {
	// Endpoint is host:port.
	Endpoint string
	// AccessKey and SecretKey are the root account's.
	AccessKey, SecretKey string

	dir, bin string
	proc     *process
}

// StartS3 starts an S3 server for a test, stopped when the test ends. One
// that cannot start (its binary missing included) fails the test with the
// reason and the command that fixes it.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin, err := ToolPath("versitygw")
	if err != nil {
		t.Fatal(err)
	}
	s := &S3{Endpoint: FreeAddrsForTest(t, 1)[0], AccessKey: "plumbtest", SecretKey: "s3-secret-key-for-tests", dir: t.TempDir(), bin: bin}
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	t.Cleanup(func() {
		if s.proc != nil {
			_ = s.proc.stop(10 * time.Second)
		}
	})
	return s
}

// Start starts the server again after Stop, with the same content.
func (s *S3) Start(t testing.TB) {
	t.Helper()
	args := []string{"--port", s.Endpoint, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet", "posix", filepath.Join(s.dir, "data")}
	proc, err := startProcess("versitygw", s.bin, args, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	s.proc = proc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := s.client(t)
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := s.proc.errIfExited(); err != nil {
			return false, err
		}
		_, err := client.ListBuckets(ctx)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the S3 server did not become ready: %v; last lines of its log:\n%s", err, tail(s.proc.logPath, 30))
	}
}

// Stop stops the server (an outage) until Start.
func (s *S3) Stop(t testing.TB) {
	t.Helper()
	if err := s.proc.stop(10 * time.Second); err != nil {
		t.Logf("stopping the S3 server: %v", err)
	}
	s.proc = nil
}

// client is an S3 client of the root account, for the test's own writes.
func (s *S3) client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CreateBucket creates a bucket.
func (s *S3) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if err := s.client(t).MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", bucket, err)
	}
}

// Put writes objects (key → content) into bucket.
func (s *S3) Put(t testing.TB, bucket string, objects map[string]string) {
	t.Helper()
	c := s.client(t)
	for key, content := range objects {
		// A keep-alive connection the server closed breaks a PUT, which
		// the transport does not send again by itself: a fixture's
		// upload is sent again, up to three times.
		var err error
		for range 3 {
			_, err = c.PutObject(context.Background(), bucket, key, bytes.NewReader([]byte(content)), int64(len(content)), minio.PutObjectOptions{})
			var resp minio.ErrorResponse
			if err == nil || errors.As(err, &resp) && resp.StatusCode != 0 {
				break
			}
		}
		if err != nil {
			t.Fatalf("putting %s/%s: %v", bucket, key, err)
		}
	}
}

// Remove deletes objects from bucket.
func (s *S3) Remove(t testing.TB, bucket string, keys ...string) {
	t.Helper()
	c := s.client(t)
	for _, key := range keys {
		if err := c.RemoveObject(context.Background(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatalf("removing %s/%s: %v", bucket, key, err)
		}
	}
}

// S3Requests counts the S3 requests sent through it, as "LIST" (a listing
// of objects), "GET" (an object's download) or "<METHOD> other".
type S3Requests struct {
	mu    sync.Mutex
	count map[string]int
}

// RoundTrip counts req and sends it with http.DefaultTransport.
func (c *S3Requests) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := req.Method + " other"
	path := strings.Trim(req.URL.Path, "/")
	switch {
	case req.Method == http.MethodGet && !strings.Contains(path, "/") && req.URL.Query().Has("list-type"):
		kind = "LIST"
	case req.Method == http.MethodGet && strings.Contains(path, "/"):
		kind = "GET"
	}
	c.mu.Lock()
	if c.count == nil {
		c.count = map[string]int{}
	}
	c.count[kind]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// Reset returns the counts since the last Reset and starts again.
func (c *S3Requests) Reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.count
	c.count = nil
	if out == nil {
		out = map[string]int{}
	}
	return out
}
