// Package runtimelog is the logger that client-go and controller-runtime
// write through: their lines, kept short and rate-limited. During an API
// server outage client-go logs every Event it cannot write with the whole
// Event in the line (about a kilobyte each); here each kind of error (its
// message and cause) is logged at most once per interval, with the count of
// those left out, and objects in key-value pairs are named, not dumped.
// Panics are logged every time, with their whole stack.
package runtimelog

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// maxValueLength bounds a logged string value, maxErrorLength an error.
const (
	maxValueLength = 200
	maxErrorLength = 500
)

// maxKinds bounds the kinds of error the limiter remembers; past it, those
// not logged within the interval are forgotten.
const maxKinds = 1000

// limiter remembers, per error message, when it was last logged and how
// many were left out since. It is shared by every sink derived from one.
type limiter struct {
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

// New wraps base: error lines with the same message are logged at most once
// every interval (with "suppressed", the number left out), and values that
// are objects are replaced by their kind and name.
func New(base logr.Logger, every time.Duration, now func() time.Time) logr.Logger {
	if now == nil {
		now = time.Now
	}
	l := &limiter{every: every, now: now, last: map[string]time.Time{}, suppressed: map[string]int{}}
	return logr.New(&sink{inner: base.GetSink(), limiter: l})
}

type sink struct {
	inner   logr.LogSink
	limiter *limiter
}

func (s *sink) Init(info logr.RuntimeInfo) { s.inner.Init(info) }
func (s *sink) Enabled(level int) bool     { return s.inner.Enabled(level) }
func (s *sink) WithName(name string) logr.LogSink {
	return &sink{inner: s.inner.WithName(name), limiter: s.limiter}
}
func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{inner: s.inner.WithValues(shorten(kv)...), limiter: s.limiter}
}

// WithCallDepth lets callers that wrap the logger name their own caller.
func (s *sink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.inner.(logr.CallDepthLogSink); ok {
		return &sink{inner: cd.WithCallDepth(depth), limiter: s.limiter}
	}
	return s
}

func (s *sink) Info(level int, msg string, kv ...any) {
	s.inner.Info(level, msg, shorten(kv)...)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	if strings.Contains(strings.ToLower(msg), "panic") {
		s.inner.Error(err, msg, kv...) // every time, stack and all
		return
	}
	kind := msg
	if err != nil {
		kind += "\x00" + cut(err.Error())
	}
	suppressed, ok := s.limiter.allow(kind)
	if !ok {
		return
	}
	kv = shorten(kv)
	if suppressed > 0 {
		kv = append(kv, "suppressed", suppressed)
	}
	s.inner.Error(shortError(err), msg, kv...)
}

// allow reports whether an error of kind may be logged now, and how many
// were left out.
func (l *limiter) allow(kind string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, ok := l.last[kind]; ok && now.Sub(last) < l.every {
		l.suppressed[kind]++
		return 0, false
	}
	if _, known := l.last[kind]; !known && len(l.last) >= maxKinds {
		for k, last := range l.last {
			if now.Sub(last) >= l.every {
				delete(l.last, k)
				delete(l.suppressed, k)
			}
		}
		if len(l.last) >= maxKinds {
			kind = "\x00other kinds" // every kind beyond the bound shares one limit
			if last, ok := l.last[kind]; ok && now.Sub(last) < l.every {
				l.suppressed[kind]++
				return 0, false
			}
		}
	}
	l.last[kind] = now
	n := l.suppressed[kind]
	delete(l.suppressed, kind)
	return n, true
}

// shortError cuts an error's message, keeping the error for errors.Is.
func shortError(err error) error {
	if err == nil || len(err.Error()) <= maxErrorLength {
		return err
	}
	return &cutError{err: err}
}

type cutError struct{ err error }

func (e *cutError) Error() string { return e.err.Error()[:maxErrorLength] + "…" }
func (e *cutError) Unwrap() error { return e.err }

// named is what an API object offers to be named by.
type named interface {
	GetNamespace() string
	GetName() string
}

// shorten replaces object values by their kind and name, and cuts long
// strings.
func shorten(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		switch t := v.(type) {
		case string:
			out[i] = cut(t)
		case error, bool, int, int32, int64, uint, uint32, uint64, float32, float64, time.Duration, time.Time, nil:
			out[i] = v
		case named:
			out[i] = fmt.Sprintf("%T %s/%s", v, t.GetNamespace(), t.GetName())
		case fmt.Stringer:
			out[i] = cut(t.String())
		default:
			out[i] = cut(fmt.Sprintf("%T", v))
		}
	}
	return out
}

func cut(s string) string {
	if len(s) <= maxValueLength {
		return s
	}
	return s[:maxValueLength] + "…"
}
