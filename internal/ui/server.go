// Package ui is plumb's web dashboard: server-rendered pages (Go's
// html/template, assets embedded) about Apps, read and changed with the
// identity of the person using it (their kubeconfig under `plumb ui`), so
// that the API server's RBAC decides what they see and may do. It holds no
// state of its own.
//
// It serves the Apps page (every App's Ready, Healthy, revision, last
// tick, failing phase and drift, with counts and filters) and the App page
// (phases, the recent ticks' timeline, the inventory tree, drift, the diff
// the next tick would apply, Events), with the actions Sync, Suspend and
// Resume. It sends a strict Content-Security-Policy, makes no request to
// any other origin, refuses cross-origin writes (CSRF) and, on loopback,
// any Host but its own (DNS rebinding).
package ui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/reconcile"
)

//go:embed templates/*.html
var templates embed.FS

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the dashboard's own stylesheet and script
// (no inline one), its own live stream, and nothing else: no other
// origin, no frame, no plugin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Viewer is whom a request acts for: its clients act with their rights.
type Viewer struct {
	// Name says who they are, in messages; Groups are their groups, when
	// an Identity knows them.
	Name   string
	Groups []string
	// Client reads and writes Apps and reads Events, as them.
	Client client.Client
	// Preview previews an App as them, for the App page's diff (nil: the
	// page shows none). Previews run one at a time.
	Preview PreviewFunc
	// Key names them in the browser (the live script's lock and channel,
	// so that two people's tabs in one browser never share a stream); not
	// a secret.
	Key string
	// MayRead says of namespaces whether they may read their Apps (a
	// namespace missing from the answer: no): the live stream and the
	// Apps page carry only those. nil means every App the stream's
	// informer holds (it reads with their own identity). An Identity that
	// serves many people answers from its own cache of access reviews.
	MayRead func(ctx context.Context, namespaces []string) (map[string]bool, error)
}

// PreviewFunc previews an App: what its next tick would do.
type PreviewFunc func(ctx context.Context, app *plumbv1.App) (*reconcile.Preview, error)

// Identity tells whom a request acts for.
type Identity interface {
	// ViewerOf is the viewer of r, or an error that refuses r (an
	// *HTTPError says with which status).
	ViewerOf(r *http.Request) (*Viewer, error)
}

// Local is the Identity of `plumb ui`: every request acts as the one
// viewer (the kubeconfig's user).
type Local struct{ Viewer *Viewer }

// ViewerOf is the one viewer.
func (l Local) ViewerOf(*http.Request) (*Viewer, error) { return l.Viewer, nil }

// HTTPError is an error with the HTTP status it answers a request with.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string { return e.Message }

// Options configure a Server.
type Options struct {
	// Identity tells whom each request acts for.
	Identity Identity
	// AllowedHosts, when set, are the only Host headers answered (a page
	// served on loopback must not be reachable through another name that
	// resolves there: DNS rebinding).
	AllowedHosts []string
	// Apps is the cache whose App informer feeds the live stream (nil: no
	// live updates). The caller starts it.
	Apps cache.Cache
	// MaxStreams and MaxStreamsPerViewer bound the open live streams
	// (defaults DefaultMaxStreams and DefaultMaxStreamsPerViewer).
	MaxStreams, MaxStreamsPerViewer int
	// PreviewTimeout bounds the App page's diff (default 60s).
	PreviewTimeout time.Duration
	// MaxPreviews bounds the previews that run at once, whoever asks
	// (default DefaultMaxPreviews): each may render a tenant's Helm or
	// Kustomize source with up to the render memory limit, so viewers
	// together must not take more than the dashboard has.
	MaxPreviews int
	// AppsNamespaces are the namespaces Apps holds ("" or nil: every
	// namespace): a page of another namespace is not updated live.
	AppsNamespaces []string
	// Token, when set, is the secret that the printed URL carries: a
	// browser that opens it gets a session cookie, and every request
	// without that cookie is refused (under `plumb ui`, other users of the
	// machine can reach its loopback port too).
	Token string
	// Now is the clock for ages (default time.Now).
	Now func() time.Time
	Log *zap.Logger
}

// Server serves the dashboard.
type Server struct {
	opts  Options
	pages *template.Template
	hub   hub

	// previews holds a token per preview running (MaxPreviews); queued
	// counts those waiting for one.
	previews chan struct{}
	queued   atomic.Int32

	mu    sync.Mutex
	slots map[string]*previewSlot // one preview at a time per viewer (they share a Git folder), while one runs or waits
}

// DefaultMaxPreviews is how many previews run at once by default.
const DefaultMaxPreviews = 2

// New makes a Server.
func New(opts Options) (*Server, error) {
	if opts.Identity == nil {
		return nil, errors.New("ui: no Identity")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PreviewTimeout == 0 {
		opts.PreviewTimeout = time.Minute
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxPreviews <= 0 {
		opts.MaxPreviews = DefaultMaxPreviews
	}
	if opts.MaxStreamsPerViewer == 0 {
		opts.MaxStreamsPerViewer = DefaultMaxStreamsPerViewer
	}
	pages, err := template.ParseFS(templates, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, pages: pages, previews: make(chan struct{}, opts.MaxPreviews), slots: map[string]*previewSlot{}}
	if opts.Apps != nil {
		if err := s.watchApps(context.Background(), opts.Apps); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Handler is the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(static, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /{$}", s.withViewer(s.apps))
	mux.HandleFunc("GET /apps/{namespace}/{name}", s.withViewer(s.app))
	mux.HandleFunc("GET /events", s.withViewer(s.events))
	mux.HandleFunc("POST /apps/{namespace}/{name}/sync", s.withViewer(s.sync))
	mux.HandleFunc("POST /apps/{namespace}/{name}/suspend", s.withViewer(s.suspend))
	mux.HandleFunc("POST /apps/{namespace}/{name}/resume", s.withViewer(s.resume))
	return s.secure(http.NewCrossOriginProtection().Handler(s.session(mux)))
}

// sessionCookie is the name of the cookie of a browser that opened the
// printed URL: its own per token, since a browser keeps one set of cookies
// for every port of a host (two plumb ui on 127.0.0.1 must not share one).
func sessionCookie(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "plumb-ui-" + hex.EncodeToString(sum[:6])
}

// session lets through only requests of a browser that opened the URL
// with the token (when there is one): that request gets the cookie, and
// is sent on to the same page without the token in its URL.
func (s *Server) session(next http.Handler) http.Handler {
	if s.opts.Token == "" {
		return next
	}
	cookie := sessionCookie(s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token := r.URL.Query().Get("token"); token != "" && r.Method == http.MethodGet {
			if subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.Token)) != 1 {
				http.Error(w, "this is not the URL plumb ui printed: open that one", http.StatusUnauthorized)
				return
			}
			// Lax, not Strict: the URL may be opened from a link elsewhere (a
			// terminal, a chat), a cross-site navigation; writes are
			// same-origin only anyway (CrossOriginProtection).
			http.SetCookie(w, &http.Cookie{Name: cookie, Value: s.opts.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
			q := r.URL.Query()
			q.Del("token")
			to := "/" + strings.TrimLeft(r.URL.Path, "/") // never //other.host
			if len(q) > 0 {
				to += "?" + q.Encode()
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(cookie); err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.opts.Token)) != 1 {
			http.Error(w, "open the URL plumb ui printed (it holds this session's token)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure sets the headers every answer carries and refuses a Host that
// is not allowed.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if len(s.opts.AllowedHosts) > 0 && !allowedHost(s.opts.AllowedHosts, r.Host) {
			http.Error(w, "this dashboard answers only to "+strings.Join(s.opts.AllowedHosts, ", "), http.StatusMisdirectedRequest)
			return
		}
		// Another site may make the browser load a page (a link), but not
		// fetch one, an asset or the stream as a resource of its own: that
		// would start previews, or open streams, as the viewer.
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" && (r.Header.Get("Sec-Fetch-Mode") != "navigate" || r.Method != http.MethodGet) {
			http.Error(w, "the dashboard is not a resource of other sites", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func allowedHost(allowed []string, host string) bool {
	for _, a := range allowed {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// head is what the layout's head needs: the title, and the page, its
// filters and its viewer's key for the live script.
type head struct {
	Title, Page, Namespace, Name, Status, Query, Viewer string
	// Live says the live stream is served.
	Live bool
}

// withViewer runs h for the request's viewer, or refuses the request.
func (s *Server) withViewer(h func(http.ResponseWriter, *http.Request, *Viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		viewer, err := s.opts.Identity.ViewerOf(r)
		if err != nil {
			status := http.StatusForbidden
			var httpErr *HTTPError
			if errors.As(err, &httpErr) {
				status = httpErr.Status
			}
			http.Error(w, err.Error(), status)
			return
		}
		h(w, r, viewer)
	}
}

// render writes a page, or a plain error when its template fails.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		s.opts.Log.Error("Rendering a page failed", zap.String("page", name), zap.Error(err))
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
