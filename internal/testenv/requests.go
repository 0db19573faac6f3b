package testenv

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// RequestLog records every request made through the configs it wraps, as
// "METHOD path?query": tests count what a piece of plumb asks the API
// server.
type RequestLog struct {
	mu       sync.Mutex
	requests []string
}

// Wrap returns a copy of cfg whose requests the log records.
func (l *RequestLog) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			l.mu.Lock()
			l.requests = append(l.requests, req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery)
			l.mu.Unlock()
			return rt.RoundTrip(req)
		})
	}
	return cfg
}

// Matching returns the requests recorded so far that contain part ("" for
// all).
func (l *RequestLog) Matching(part string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.requests {
		if strings.Contains(r, part) {
			out = append(out, r)
		}
	}
	return out
}

// Reset forgets what was recorded.
func (l *RequestLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = nil
}

// Take returns every request recorded so far and forgets them.
func (l *RequestLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.requests
	l.requests = nil
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
