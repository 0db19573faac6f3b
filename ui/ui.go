// Package ui is plumb's web dashboard: server-rendered pages (Go's
// html/template, assets embedded) about Apps, read with the identity of
// whoever runs `plumb ui` (their kubeconfig), so that the API server's
// RBAC decides what they see. It holds no state of its own.
//
// This first step serves the Apps page: every App with Ready, Healthy,
// revision, last tick, failing phase, drift and message, counts at the
// top, and filters by namespace and text. It sends a strict
// Content-Security-Policy and makes no request to any other origin.
package ui

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/appview"
)

//go:embed templates/*.html
var templates embed.FS

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the page's own stylesheet and nothing else:
// no script, no frame, no other origin.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Options configure a Server.
type Options struct {
	// Client reads Apps, with the identity of whoever runs the dashboard.
	Client client.Reader
	// Now is the clock for ages (default time.Now).
	Now func() time.Time
}

// Server serves the dashboard.
type Server struct {
	opts  Options
	pages *template.Template
}

// New makes a Server.
func New(opts Options) (*Server, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	pages, err := template.ParseFS(templates, "templates/*.html")
	if err != nil {
		return nil, err
	}
	return &Server{opts: opts, pages: pages}, nil
}

// Handler is the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(static, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /{$}", s.apps)
	return secure(mux)
}

// secure sets the headers every answer carries.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// appRow is one App as the Apps page shows it.
type appRow struct {
	Namespace, Name, Ready, Healthy, Revision, LastTick, FailingPhase, Message string
	RevisionURL                                                                string
	Drift                                                                      int32
}

type appsPage struct {
	Namespace, Query, Error        string
	Total, Ready, Failing, Drifted int
	Apps                           []appRow
}

func (s *Server) apps(w http.ResponseWriter, r *http.Request) {
	page := appsPage{Namespace: r.URL.Query().Get("namespace"), Query: r.URL.Query().Get("q")}
	list := &plumbv1.AppList{}
	var opts []client.ListOption
	if page.Namespace != "" {
		opts = append(opts, client.InNamespace(page.Namespace))
	}
	if err := s.opts.Client.List(r.Context(), list, opts...); err != nil {
		page.Error = "The Apps could not be listed with your rights: " + appview.Printable(err.Error())
	}
	now, query := s.opts.Now(), strings.ToLower(page.Query)
	for i := range list.Items {
		app := &list.Items[i]
		row := appRow{Namespace: app.Namespace, Name: app.Name, Ready: status(app, plumbv1.ConditionReady), Healthy: status(app, plumbv1.ConditionHealthy),
			Revision: appview.ShortRevision(app.Status.LastAppliedRevision), LastTick: appview.Age(app.Status.LastTickTime, now),
			FailingPhase: appview.FailingPhase(app), Message: message(app),
			RevisionURL: commitURL(app.Spec.Source.URL, app.Status.LastAppliedRevision)}
		row.Drift = appview.DriftCount(app)
		if query != "" && !strings.Contains(strings.ToLower(row.Namespace+" "+row.Name+" "+row.Message), query) {
			continue
		}
		page.Total++
		if row.Ready == "True" {
			page.Ready++
		}
		if row.FailingPhase != "" {
			page.Failing++
		}
		if row.Drift > 0 {
			page.Drifted++
		}
		page.Apps = append(page.Apps, row)
	}
	sort.Slice(page.Apps, func(i, j int) bool {
		return page.Apps[i].Namespace+"/"+page.Apps[i].Name < page.Apps[j].Namespace+"/"+page.Apps[j].Name
	})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages.ExecuteTemplate(w, "apps.html", page); err != nil {
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
	}
}

func status(app *plumbv1.App, condition string) string {
	if c := apimeta.FindStatusCondition(app.Status.Conditions, condition); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

func message(app *plumbv1.App) string {
	c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	if c == nil {
		return ""
	}
	return appview.OneLine(c.Message)
}

// knownHosts are Git hosts whose web pages show a commit at
// https://HOST/OWNER/REPO/commit/SHA.
var knownHosts = map[string]bool{"github.com": true, "gitlab.com": true, "codeberg.org": true}

// commitURL is the web page of the revision's commit, for a repository
// on a known host reached over https; "" for any other (an App's URL is
// whatever its author wrote: only a URL built here, with scheme https,
// is ever a link).
func commitURL(repository, revision string) string {
	_, hash, ok := strings.Cut(revision, "sha1:")
	if !ok || len(hash) != 40 {
		return ""
	}
	u, err := url.Parse(repository)
	if err != nil || u.Scheme != "https" || !knownHosts[strings.ToLower(u.Host)] || u.User != nil {
		return ""
	}
	path := strings.TrimSuffix(strings.Trim(u.Path, "/"), ".git")
	if strings.Count(path, "/") < 1 || strings.ContainsAny(path, "?#") {
		return ""
	}
	return (&url.URL{Scheme: "https", Host: strings.ToLower(u.Host), Path: "/" + path + "/commit/" + hash}).String()
}
