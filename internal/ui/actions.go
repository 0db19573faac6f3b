package ui

import (
	"encoding/json"
	"net/http"
	"net/url"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/syncrequest"
)

// The actions write as the viewer: a refusal of the API server (RBAC,
// admission) is shown on the App's page with its status, and nothing
// changes. Cross-origin posts never reach them (CSRF, see Handler).

// sync asks for a tick now (the sync annotation), then shows the App's
// page following the request until a tick handles it.
func (s *Server) sync(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	key := keyOf(r)
	app := &plumbv1.App{}
	if err := viewer.Client.Get(r.Context(), key, app); err != nil {
		s.renderApp(w, r, viewer, &appPage{Error: refusal("read App "+key.String(), err)}, statusOf(err))
		return
	}
	if app.Spec.Suspend {
		s.renderApp(w, r, viewer, &appPage{Error: "App " + key.String() + " is suspended: no tick runs until it is resumed, so a sync would wait for ever. Resume it first."}, http.StatusConflict)
		return
	}
	now := s.opts.Now()
	if err := syncrequest.Annotate(r.Context(), viewer.Client, key, now, plumbv1.SyncRequestedByManual); err != nil {
		s.renderApp(w, r, viewer, &appPage{Error: refusal("ask App "+key.String()+" for a sync (patch Apps)", err)}, statusOf(err))
		return
	}
	to := url.Values{"sync": {syncrequest.RequestValue(now)}}
	http.Redirect(w, r, appPath(key)+"?"+to.Encode(), http.StatusSeeOther)
}

// suspend sets spec.suspend, once confirmed (the form's confirm=yes).
func (s *Server) suspend(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, appPath(keyOf(r))+"?confirm=suspend", http.StatusSeeOther)
		return
	}
	s.setSuspend(w, r, viewer, true)
}

// resume clears spec.suspend.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	s.setSuspend(w, r, viewer, false)
}

func (s *Server) setSuspend(w http.ResponseWriter, r *http.Request, viewer *Viewer, suspend bool) {
	key := keyOf(r)
	what := "resume"
	if suspend {
		what = "suspend"
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"suspend": suspend}})
	if err != nil {
		s.renderApp(w, r, viewer, &appPage{Error: err.Error()}, http.StatusInternalServerError)
		return
	}
	app := &plumbv1.App{}
	app.Namespace, app.Name = key.Namespace, key.Name
	if err := viewer.Client.Patch(r.Context(), app, client.RawPatch(types.MergePatchType, patch)); err != nil {
		s.renderApp(w, r, viewer, &appPage{Error: refusal(what+" App "+key.String()+" (patch Apps)", err)}, statusOf(err))
		return
	}
	http.Redirect(w, r, appPath(key)+"?done="+what, http.StatusSeeOther)
}

func appPath(key types.NamespacedName) string {
	return "/apps/" + url.PathEscape(key.Namespace) + "/" + url.PathEscape(key.Name)
}
