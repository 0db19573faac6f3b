// Package runtimelog is the logger that client-go and controller-runtime
// write through: their lines, kept short and rate-limited. During an API
// server outage client-go logs every Event it cannot write with the whole
// Event in the line (about a kilobyte each); here each error message is
// logged at most once per interval per message, with the count of those
// left out, and objects in key-value pairs are named, not dumped.
package runtimelog

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// maxValueLength bounds a logged string value.
const maxValueLength = 200

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

func (s *sink) Info(level int, msg string, kv ...any) {
	s.inner.Info(level, msg, shorten(kv)...)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	suppressed, ok := s.limiter.allow(msg)
	if !ok {
		return
	}
	kv = shorten(kv)
	if suppressed > 0 {
		kv = append(kv, "suppressed", suppressed)
	}
	s.inner.Error(err, msg, kv...)
}

// allow reports whether msg may be logged now, and how many were left out.
func (l *limiter) allow(msg string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, ok := l.last[msg]; ok && now.Sub(last) < l.every {
		l.suppressed[msg]++
		return 0, false
	}
	l.last[msg] = now
	n := l.suppressed[msg]
	delete(l.suppressed, msg)
	return n, true
}

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
