package testenv

import (
	"net/http"
	"strings"
	"sync"
)

// RegistryRequests is an http.RoundTripper that counts the requests it
// carries to an OCI registry, by method and kind of path: "HEAD
// manifests", "GET blobs", "GET tags", "GET ping", "GET other".
type RegistryRequests struct {
	mu    sync.Mutex
	count map[string]int
}

// RoundTrip counts req and sends it with http.DefaultTransport.
func (c *RegistryRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := "other"
	switch {
	case strings.Contains(req.URL.Path, "/manifests/"):
		kind = "manifests"
	case strings.Contains(req.URL.Path, "/blobs/"):
		kind = "blobs"
	case strings.HasSuffix(req.URL.Path, "/tags/list"):
		kind = "tags"
	case req.URL.Path == "/v2/":
		kind = "ping"
	}
	c.mu.Lock()
	if c.count == nil {
		c.count = map[string]int{}
	}
	c.count[req.Method+" "+kind]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// Reset returns the counts since the last Reset and starts again.
func (c *RegistryRequests) Reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.count
	c.count = map[string]int{}
	if got == nil {
		got = map[string]int{}
	}
	return got
}
