package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// The live stream (GET /events) is Server-Sent Events fed by one App
// informer: no viewer's page polls the API server. Each stream carries
// only the Apps of the namespaces its viewer may read (Viewer.MayRead,
// asked per namespace and cached by the Identity), never one feed shared
// by all. A browser opens one stream for all its tabs (static/live.js
// elects one tab to hold it), so that open tabs do not exhaust its
// per-origin connection limit; the server bounds streams per viewer and
// in all, and a stream that cannot keep up is closed (its page reconnects
// and starts from a new snapshot).
//
// Events: "snapshot" (every row the viewer may read, first), "app" (a row
// that was added or changed) and "delete" ({namespace, name}).

// Stream limits by default.
const (
	DefaultMaxStreams          = 200
	DefaultMaxStreamsPerViewer = 4
	// streamBuffer is how many changes a stream may fall behind.
	streamBuffer = 256
	// keepAlive is how often an idle stream sends a comment, so that
	// proxies do not close it.
	keepAlive = 25 * time.Second
	// retryMillis is the reconnection delay the stream tells EventSource.
	retryMillis = 2000
	// writeTimeout bounds one write to a stream: a client that stops
	// reading loses its stream (and its slot).
	writeTimeout = 10 * time.Second
	// maxStreamAge ends a stream after a while: the browser opens a new
	// one, which the Identity (and the proxy in front) checks afresh.
	maxStreamAge = 10 * time.Minute
	// mayReadTTL is how long a stream reuses a "may read" answer.
	mayReadTTL = 30 * time.Second
)

// snapshot is the first event of a stream: the rows, and the namespaces
// the stream covers (nil: every namespace).
type snapshot struct {
	Scope []string `json:"scope"`
	Rows  []appRow `json:"rows"`
}

// change is one App that changed (its row, made once for every stream),
// or (row nil) one that was deleted.
type change struct {
	row     *appRow
	deleted types.NamespacedName
}

// stream is one viewer's open stream.
type stream struct {
	viewer  string
	changes chan change
	dropped bool // closed because it fell behind (hub.mu)
}

// hub fans the informer's changes out to the open streams.
type hub struct {
	mu        sync.Mutex
	streams   map[*stream]struct{}
	perViewer map[string]int
	closed    bool
}

// join opens a stream for viewer, within the limits.
func (h *hub) join(viewer string, maxTotal, maxPerViewer int) (*stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, &HTTPError{Status: http.StatusServiceUnavailable, Message: "the dashboard is shutting down"}
	case len(h.streams) >= maxTotal:
		return nil, &HTTPError{Status: http.StatusTooManyRequests, Message: "too many live streams are open"}
	case h.perViewer[viewer] >= maxPerViewer:
		return nil, &HTTPError{Status: http.StatusTooManyRequests, Message: fmt.Sprintf("you have %d live streams open already: close a browser", maxPerViewer)}
	}
	if h.streams == nil {
		h.streams, h.perViewer = map[*stream]struct{}{}, map[string]int{}
	}
	s := &stream{viewer: viewer, changes: make(chan change, streamBuffer)}
	h.streams[s] = struct{}{}
	h.perViewer[viewer]++
	return s, nil
}

// leave closes a stream.
func (h *hub) leave(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.streams[s]; !ok {
		return
	}
	delete(h.streams, s)
	if h.perViewer[s.viewer]--; h.perViewer[s.viewer] <= 0 {
		delete(h.perViewer, s.viewer)
	}
	h.drop(s)
}

// publish hands c to every stream; one whose buffer is full is dropped.
func (h *hub) publish(c change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.streams {
		if s.dropped {
			continue
		}
		select {
		case s.changes <- c:
		default:
			h.drop(s)
		}
	}
}

// drop closes a stream that the hub will not feed any more. h.mu is held.
func (h *hub) drop(s *stream) {
	if !s.dropped {
		s.dropped = true
		close(s.changes)
	}
}

// close ends every stream and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.streams {
		h.drop(s)
	}
}

// watchApps feeds the hub from the cache's App informer.
func (s *Server) watchApps(ctx context.Context, apps cache.Cache) error {
	informer, err := apps.GetInformer(ctx, &plumbv1.App{})
	if err != nil {
		return fmt.Errorf("the App informer of the live stream: %w", err)
	}
	changed := func(obj any) {
		if app, ok := obj.(*plumbv1.App); ok {
			row := rowOf(app, s.opts.Now())
			s.hub.publish(change{row: &row})
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if app, ok := obj.(*plumbv1.App); ok {
				s.hub.publish(change{deleted: types.NamespacedName{Namespace: app.Namespace, Name: app.Name}})
			}
		},
	})
	return err
}

// Close ends the open live streams (call it when the HTTP server shuts
// down: streams never end by themselves).
func (s *Server) Close() { s.hub.close() }

// events serves the viewer's live stream.
func (s *Server) events(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	if s.opts.Apps == nil {
		http.Error(w, "live updates are off", http.StatusNotFound)
		return
	}
	st, err := s.hub.join(viewer.Name, s.opts.MaxStreams, s.opts.MaxStreamsPerViewer)
	if err != nil {
		w.Header().Set("Retry-After", "10")
		http.Error(w, err.Error(), err.(*HTTPError).Status)
		return
	}
	defer s.hub.leave(st)
	// Joined before the snapshot is listed: no change is missed between
	// the two (one listed and sent again is harmless).
	list := &plumbv1.AppList{}
	cached, cancel := context.WithTimeout(r.Context(), cacheWait)
	defer cancel()
	if err := s.opts.Apps.List(cached, list); err != nil {
		http.Error(w, "the live stream's App cache: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	may := s.access(r.Context(), viewer)
	may.load(namespacesOf(list.Items))
	now := s.opts.Now()
	rows := []appRow{}
	for i := range list.Items {
		if may.may(list.Items[i].Namespace) {
			rows = append(rows, rowOf(&list.Items[i], now))
		}
	}
	write := func(text string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := io.WriteString(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	send := func(event string, data any) bool {
		payload, err := json.Marshal(data)
		if err != nil {
			s.opts.Log.Error("Encoding a live event failed", zap.Error(err))
			return false
		}
		return write("event: " + event + "\ndata: " + string(payload) + "\n\n")
	}
	if !write("retry: "+strconv.Itoa(retryMillis)+"\n\n") || !send("snapshot", snapshot{Scope: s.opts.AppsNamespaces, Rows: rows}) {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	end := time.NewTimer(maxStreamAge)
	defer end.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return // the page reconnects, and is let in afresh
		case <-ping.C:
			if !write(": ping\n\n") {
				return
			}
		case c, ok := <-st.changes:
			if !ok {
				return // fell behind, or the server shuts down: the page reconnects
			}
			if c.row == nil {
				if may.may(c.deleted.Namespace) && !send("delete", map[string]string{"namespace": c.deleted.Namespace, "name": c.deleted.Name}) {
					return
				}
				continue
			}
			if may.may(c.row.Namespace) && !send("app", c.row) {
				return
			}
		}
	}
}

// access says whether the viewer may read the Apps of a namespace, as
// the Identity says, asked once per namespace per mayReadTTL of a stream
// or page, and for many namespaces at once where it can (load).
type access struct {
	s       *Server
	ctx     context.Context
	viewer  *Viewer
	answers map[string]answer
}

type answer struct {
	ok    bool
	until time.Time
}

func (s *Server) access(ctx context.Context, viewer *Viewer) *access {
	return &access{s: s, ctx: ctx, viewer: viewer, answers: map[string]answer{}}
}

// load asks, in one go, about the namespaces not answered yet.
func (a *access) load(namespaces []string) {
	if a.viewer.MayRead == nil {
		return
	}
	now := time.Now()
	var ask []string
	for _, ns := range namespaces {
		if got, ok := a.answers[ns]; (!ok || !now.Before(got.until)) && !slices.Contains(ask, ns) {
			ask = append(ask, ns)
		}
	}
	if len(ask) == 0 {
		return
	}
	allowed, err := a.viewer.MayRead(a.ctx, ask)
	if err != nil {
		a.s.opts.Log.Info("Asking whether a viewer may read namespaces' Apps failed", zap.String("viewer", a.viewer.Name), zap.Int("namespaces", len(ask)), zap.Error(err))
	}
	for _, ns := range ask {
		a.answers[ns] = answer{ok: allowed[ns], until: now.Add(mayReadTTL)} // unknown is no
	}
}

// may reports whether the viewer may read namespace's Apps.
func (a *access) may(namespace string) bool {
	if a.viewer.MayRead == nil {
		return true
	}
	if got, ok := a.answers[namespace]; !ok || !time.Now().Before(got.until) {
		a.load([]string{namespace})
	}
	return a.answers[namespace].ok
}

// namespacesOf are the namespaces of apps.
func namespacesOf(apps []plumbv1.App) []string {
	var out []string
	for i := range apps {
		if !slices.Contains(out, apps[i].Namespace) {
			out = append(out, apps[i].Namespace)
		}
	}
	return out
}
