package ui

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
	"github.com/plumb-dev/plumb/internal/syncrequest"
)

// appRow is one App as the Apps page shows it (and the live stream sends
// it: the JSON names are the page's).
type appRow struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Ready       string `json:"ready"`
	Healthy     string `json:"healthy"`
	Revision    string `json:"revision"`
	RevisionURL string `json:"revisionURL,omitempty"`
	LastTick    string `json:"lastTick"`
	// LastTickAt is when the last tick ended (Unix milliseconds; 0: none),
	// for the page to age it itself between changes.
	LastTickAt   int64  `json:"lastTickAt,omitempty"`
	FailingPhase string `json:"failingPhase,omitempty"`
	Drift        int32  `json:"drift"`
	DriftBy      string `json:"driftBy,omitempty"`
	Suspended    bool   `json:"suspended,omitempty"`
	Message      string `json:"message,omitempty"`
	// Shard is the controller replica that last ticked the App
	// (--shards=auto; empty with one replica ticking every App).
	Shard string `json:"shard,omitempty"`
	// Destination is the kubeconfig Secret of the cluster the App deploys
	// into (spec.destination; empty for plumb's own cluster).
	Destination string `json:"destination,omitempty"`
	// SyncHandled is status.lastHandledSyncRequest and SyncRequested the
	// sync annotation, which the App page follows after a Sync
	// (syncrequest.Answers).
	SyncHandled   string `json:"syncHandled,omitempty"`
	SyncRequested string `json:"syncRequested,omitempty"`
	// SyncOutcome is what the tick that handled it did (appview.Outcome);
	// SyncFailed says it did not converge the App.
	SyncOutcome string `json:"syncOutcome,omitempty"`
	SyncFailed  bool   `json:"syncFailed,omitempty"`
}

func rowOf(app *plumbv1.App, now time.Time) appRow {
	row := appRow{Namespace: app.Namespace, Name: app.Name, Ready: conditionStatus(app, plumbv1.ConditionReady), Healthy: conditionStatus(app, plumbv1.ConditionHealthy),
		Revision: appview.ShortRevision(app.Status.LastAppliedRevision), LastTick: appview.Age(app.Status.LastTickTime, now),
		FailingPhase: appview.FailingPhase(app), Message: readyMessage(app), Suspended: app.Spec.Suspend,
		RevisionURL: commitURL(app.Spec.Source.GitRepository().URL, app.Status.LastAppliedRevision), SyncHandled: app.Status.LastHandledSyncRequest,
		SyncRequested: syncrequest.Requested(app), Shard: appview.Printable(app.Status.Shard)}
	row.Drift = appview.DriftCount(app)
	row.Destination = appview.Printable(app.Spec.Destination.SecretName())
	if t := app.Status.LastTickTime; t != nil {
		row.LastTickAt = t.UnixMilli()
	}
	if row.SyncHandled != "" {
		outcome, err := appview.Outcome(app)
		if err != nil {
			outcome = err.Error()
		}
		row.SyncOutcome, row.SyncFailed = appview.OneLine(outcome), err != nil
	}
	if d := app.Status.Drift; d != nil {
		var managers []string
		for _, o := range d.Objects {
			for _, m := range o.Managers {
				if !slices.Contains(managers, m) {
					managers = append(managers, m)
				}
			}
		}
		row.DriftBy = appview.Printable(strings.Join(managers, ", "))
	}
	return row
}

// The status filter's values.
var statusFilters = []string{"all", "ready", "failing", "drifted", "suspended"}

// matches reports whether the row passes the page's filters.
func (row appRow) matches(status, query string) bool {
	switch status {
	case "ready":
		if row.Ready != "True" {
			return false
		}
	case "failing":
		if row.FailingPhase == "" {
			return false
		}
	case "drifted":
		if row.Drift == 0 {
			return false
		}
	case "suspended":
		if !row.Suspended {
			return false
		}
	}
	return query == "" || strings.Contains(strings.ToLower(row.Namespace+" "+row.Name+" "+row.Message), strings.ToLower(query))
}

type appsPage struct {
	Head                            head
	Namespace, Status, Query, Error string
	Statuses                        []string
	Total, Ready, Failing, Drifted  int
	Apps                            []appRow
}

func (s *Server) apps(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	q := r.URL.Query()
	page := appsPage{Namespace: q.Get("namespace"), Status: q.Get("status"), Query: q.Get("q"), Statuses: statusFilters}
	if !slices.Contains(statusFilters, page.Status) {
		page.Status = "all"
	}
	list, err := s.listApps(r.Context(), viewer, page.Namespace)
	if err != nil {
		page.Error = "The Apps could not be listed with your rights: " + appview.Printable(err.Error())
	}
	now := s.opts.Now()
	for i := range list {
		row := rowOf(&list[i], now)
		if !row.matches(page.Status, page.Query) {
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
	page.Head = head{Title: "Apps", Page: "apps", Namespace: page.Namespace, Status: page.Status, Query: page.Query, Viewer: viewer.Key, Live: s.opts.Apps != nil}
	s.render(w, http.StatusOK, "apps.html", page)
}

func conditionStatus(app *plumbv1.App, condition string) string {
	if c := apimeta.FindStatusCondition(app.Status.Conditions, condition); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

func readyMessage(app *plumbv1.App) string {
	c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	if c == nil {
		return ""
	}
	return appview.OneLine(c.Message)
}

// cacheWait bounds a wait for the live stream's cache to sync.
const cacheWait = 10 * time.Second

// listApps lists the Apps the viewer may read: of one namespace, as them;
// of every namespace, from the live stream's cache filtered as their
// stream is (no List per page view), or as them when there is no cache.
func (s *Server) listApps(ctx context.Context, viewer *Viewer, namespace string) ([]plumbv1.App, error) {
	list := &plumbv1.AppList{}
	if namespace != "" || s.opts.Apps == nil {
		var opts []client.ListOption
		if namespace != "" {
			opts = append(opts, client.InNamespace(namespace))
		}
		err := viewer.Client.List(ctx, list, opts...)
		return list.Items, err
	}
	cached, cancel := context.WithTimeout(ctx, cacheWait)
	defer cancel()
	if err := s.opts.Apps.List(cached, list); err != nil {
		// The cache has not synced (or cannot): ask as the viewer.
		err := viewer.Client.List(ctx, list)
		return list.Items, err
	}
	may := s.access(ctx, viewer)
	may.load(namespacesOf(list.Items))
	out := list.Items[:0]
	for _, app := range list.Items {
		if may.may(app.Namespace) {
			out = append(out, app)
		}
	}
	return out, nil
}
