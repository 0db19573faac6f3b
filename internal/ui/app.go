package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
	"github.com/plumb-dev/plumb/internal/preview/diffreport"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/syncrequest"
)

// appPage is the App page.
type appPage struct {
	Head            head
	Namespace, Name string
	// Found says the App was read; Error says why not, or why an action
	// failed.
	Found              bool
	Error              string
	Notice             string
	Row                appRow
	Source             string
	Applied, Attempted string
	Conditions         []conditionView
	Phases             []phaseView
	Ticks              []tickView
	Inventory          []appview.InventoryNamespace
	Drift              driftView
	ChangeSet          *plumbv1.ChangeSet
	OrderedSync        *orderedSyncView
	// Shard is the controller replica that ticks the App (--shards=auto).
	Shard string
	// Destination is the cluster the App deploys into, its kubeconfig
	// Secret's name (empty: the cluster plumb runs in).
	Destination string
	Diff        diffView
	Events      []eventView
	EventsError string
	// Sync is the progress of a sync asked for from this page.
	Sync *syncView
	// Confirm asks to confirm Suspend.
	Confirm bool
}

type conditionView struct{ Type, Status, Reason, Since, Message string }

type phaseView struct {
	Name, State, LastSuccess, LastFailure, Reason, Error string
	Failures                                             int32
}

type tickView struct {
	Start, Trigger, Result, Revision, Total, Summary string
	Failed                                           bool
	Changed                                          int32
	Bars                                             []barView
}

// barView is one phase of a tick in the timeline's SVG (x and width in
// the viewBox's units, 0–300).
type barView struct {
	Phase, Label string
	X, Width     float64
}

type driftView struct {
	Count        int32
	LastDetected string
	Objects      []driftedObjectView
	More         int
	Episodes     []eventView
}

type driftedObjectView struct{ Object, Fields, Managers, LeftTo string }

type diffView struct {
	Shown    bool
	Sections []diffreport.Section
	Summary  string
	Error    string
}

type eventView struct{ Age, Type, Reason, Message string }

// orderedSyncView is the App's last ordered sync (status.sync).
type orderedSyncView struct {
	Revision, Phase, Started, Finished, Message, Failure string
	// State is the phase's class: True (succeeded), False (failed) or
	// Unknown (under way).
	State string
	Hooks []hookView
}

type hookView struct {
	Phase, Status, Object, Message, Started, State string
	Wave                                           int32
}

type syncView struct {
	Request string
	Handled bool
	Outcome string
	Failed  bool
}

// notices are what the App page says after an action (?done=), never
// text from the URL itself.
var notices = map[string]string{
	"suspend": "Suspended: no tick runs until the App is resumed.",
	"resume":  "Resumed: the next tick runs now.",
}

func keyOf(r *http.Request) types.NamespacedName {
	return types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
}

func (s *Server) app(w http.ResponseWriter, r *http.Request, viewer *Viewer) {
	page := appPage{Confirm: r.URL.Query().Get("confirm") == "suspend", Notice: notices[r.URL.Query().Get("done")]}
	if request := r.URL.Query().Get("sync"); request != "" {
		// Only a time (as Sync writes it) is followed: the page shows it.
		if _, err := time.Parse(time.RFC3339Nano, request); err == nil {
			page.Sync = &syncView{Request: request}
		}
	}
	s.renderApp(w, r, viewer, &page, http.StatusOK)
}

// renderApp reads the App and writes its page (status is the answer's
// status when the App could be read).
func (s *Server) renderApp(w http.ResponseWriter, r *http.Request, viewer *Viewer, page *appPage, status int) {
	key := keyOf(r)
	page.Namespace, page.Name = key.Namespace, key.Name
	page.Head = head{Title: "App " + key.Namespace + "/" + key.Name, Page: "app", Namespace: key.Namespace, Name: key.Name, Viewer: viewer.Key, Live: s.opts.Apps != nil}
	app := &plumbv1.App{}
	if err := viewer.Client.Get(r.Context(), key, app); err != nil {
		page.Error = joinErrors(page.Error, refusal("read App "+key.String(), err))
		s.render(w, statusOf(err), "app.html", page)
		return
	}
	page.Found = true
	now := s.opts.Now()
	page.Row = rowOf(app, now)
	page.Source = appview.SourceOf(app)
	page.Applied = app.Status.LastAppliedRevision
	if a := app.Status.LastAttemptedRevision; a != page.Applied {
		page.Attempted = a
	}
	for _, c := range appview.Conditions {
		if cond := apimeta.FindStatusCondition(app.Status.Conditions, c); cond != nil {
			page.Conditions = append(page.Conditions, conditionView{Type: c, Status: string(cond.Status), Reason: appview.Printable(cond.Reason),
				Since: appview.Age(&cond.LastTransitionTime, now), Message: appview.OneLine(cond.Message)})
		}
	}
	page.Phases = phasesOf(app, now)
	page.Ticks = ticksOf(app, now)
	page.Inventory = appview.InventoryOf(app)
	page.ChangeSet = app.Status.LastChangeSet
	page.OrderedSync = orderedSyncOf(app.Status.Sync, now)
	page.Shard = appview.Printable(app.Status.Shard)
	page.Destination = appview.Printable(app.Spec.Destination.SecretName())
	events, err := s.eventsOf(r.Context(), viewer.Client, app)
	if err != nil {
		page.EventsError = refusal("list the App's Events", err)
	}
	page.Events = eventViews(events, now)
	page.Drift = driftOf(app, events, now)
	if page.Sync != nil {
		page.Sync.Handled = syncrequest.Answers(app.Status.LastHandledSyncRequest, page.Sync.Request, syncrequest.Requested(app))
		page.Sync.Outcome, page.Sync.Failed = page.Row.SyncOutcome, page.Row.SyncFailed
	}
	page.Diff = s.diffOf(r.Context(), viewer, app)
	s.render(w, status, "app.html", page)
}

// orderedSyncOf shows an ordered sync: where it is (phase and wave) or
// how it ended, and each hook's outcome.
func orderedSyncOf(sync *plumbv1.SyncStatus, now time.Time) *orderedSyncView {
	if sync == nil {
		return nil
	}
	v := &orderedSyncView{Revision: appview.Printable(sync.Revision), Phase: appview.SyncPlace(sync), Started: appview.Age(&sync.StartedAt, now) + " ago",
		Message: appview.OneLine(sync.Message), Failure: appview.OneLine(sync.Failure), State: stateOf(sync.Phase)}
	if sync.FinishedAt != nil {
		v.Finished = appview.Age(sync.FinishedAt, now) + " ago"
	}
	for _, h := range sync.Hooks {
		v.Hooks = append(v.Hooks, hookView{Phase: h.Phase, Wave: h.Wave, Status: h.Status, Object: appview.HookRef(h), Message: appview.OneLine(h.Message),
			Started: appview.Age(&h.StartedAt, now) + " ago", State: stateOf(h.Status)})
	}
	return v
}

// stateOf is the class of a sync's phase or a hook's status (a hook's
// Succeeded and Failed are spelled as a sync's).
func stateOf(status string) string {
	switch status {
	case plumbv1.SyncPhaseSucceeded:
		return "True"
	case plumbv1.SyncPhaseFailed:
		return "False"
	}
	return "Unknown"
}

func phasesOf(app *plumbv1.App, now time.Time) []phaseView {
	var out []phaseView
	for _, p := range appview.Phases(app) {
		v := phaseView{Name: p.Name, LastSuccess: appview.Age(p.Status.LastSuccessTime, now), LastFailure: appview.Age(p.Status.LastFailureTime, now),
			Failures: p.Status.ConsecutiveFailures, Reason: appview.Printable(p.Status.Reason), Error: appview.OneLine(p.Status.LastError)}
		switch {
		case p.Status.LastError != "":
			v.State = "failing"
		case p.Status.LastSuccessTime != nil:
			v.State = "ok"
		default:
			v.State = "not run yet"
		}
		out = append(out, v)
	}
	return out
}

// ticksOf is the timeline, newest first: each tick's phases as bars on
// one scale (the longest tick shown fills the width).
func ticksOf(app *plumbv1.App, now time.Time) []tickView {
	ticks := app.Status.RecentTicks
	var longest int64 = 1
	for _, t := range ticks {
		longest = max(longest, t.TotalMillis)
	}
	const width = 300.0
	var out []tickView
	for i := len(ticks) - 1; i >= 0; i-- {
		t := ticks[i]
		start := t.Start
		v := tickView{Start: appview.Age(&start, now) + " ago", Trigger: appview.Printable(t.Trigger), Result: appview.Printable(t.Result),
			Revision: appview.ShortRevision(t.Revision), Total: millis(t.TotalMillis), Changed: t.Changed,
			Failed: t.Result != plumbv1.ReasonSucceeded && t.Result != reconcile.TickWaiting}
		x := 0.0
		var parts []string
		for _, p := range []struct {
			name string
			ms   *int64
		}{{"Read", t.ReadMillis}, {"Observe", t.ObserveMillis}, {"Diff", t.DiffMillis}, {"Apply", t.ApplyMillis}} {
			if p.ms == nil {
				continue
			}
			w := float64(*p.ms) / float64(longest) * width
			label := p.name + " " + millis(*p.ms)
			if t.FailedPhase == p.name {
				label += " (failed)"
			}
			v.Bars = append(v.Bars, barView{Phase: strings.ToLower(p.name), Label: label, X: x, Width: max(w, 1)})
			parts = append(parts, label)
			x += w
		}
		v.Summary = strings.Join(parts, ", ")
		out = append(out, v)
	}
	return out
}

func millis(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

func driftOf(app *plumbv1.App, events []corev1.Event, now time.Time) driftView {
	var v driftView
	if d := app.Status.Drift; d != nil {
		v.Count, v.LastDetected = d.Count, appview.Age(d.LastDetectedTime, now)
		for _, o := range d.Objects {
			var left []string
			for _, f := range o.LeftTo {
				left = append(left, f.Path+" to "+f.Manager)
			}
			v.Objects = append(v.Objects, driftedObjectView{Object: appview.Printable(o.ObjectRef.String()), Fields: appview.Printable(strings.Join(o.Fields, ", ")),
				Managers: appview.Printable(strings.Join(o.Managers, ", ")), LeftTo: appview.Printable(strings.Join(left, ", "))})
		}
		v.More = d.Unlisted()
	}
	for _, e := range events {
		if e.Reason == plumbv1.ReasonDriftDetected || e.Reason == plumbv1.ReasonDriftConflict || e.Reason == string(plumbv1.EventDriftResolved) {
			v.Episodes = append(v.Episodes, eventView{Age: appview.Age(appview.EventTime(e), now), Type: e.Type, Reason: appview.Printable(e.Reason), Message: appview.OneLine(e.Message)})
		}
	}
	return v
}

// eventsOf lists the App's Events, oldest first (the newest 30).
func (s *Server) eventsOf(ctx context.Context, c client.Client, app *plumbv1.App) ([]corev1.Event, error) {
	events := &corev1.EventList{}
	selector := fields.SelectorFromSet(fields.Set{"involvedObject.kind": "App", "involvedObject.name": app.Name, "involvedObject.uid": string(app.UID)})
	if err := c.List(ctx, events, client.InNamespace(app.Namespace), client.MatchingFieldsSelector{Selector: selector}); err != nil {
		return nil, err
	}
	return appview.SortEvents(events.Items, 30), nil
}

func eventViews(events []corev1.Event, now time.Time) []eventView {
	out := make([]eventView, 0, len(events))
	for i := len(events) - 1; i >= 0; i-- { // newest first
		e := events[i]
		out = append(out, eventView{Age: appview.Age(appview.EventTime(e), now), Type: appview.Printable(e.Type), Reason: appview.Printable(e.Reason), Message: appview.OneLine(e.Message)})
	}
	return out
}

// diffOf previews the App as the viewer: what its next tick would apply.
func (s *Server) diffOf(ctx context.Context, viewer *Viewer, app *plumbv1.App) diffView {
	if viewer.Preview == nil {
		return diffView{}
	}
	waiting, stopWaiting := context.WithTimeout(ctx, s.opts.PreviewTimeout)
	defer stopWaiting()
	slot := s.takeSlot(viewer.Key)
	defer s.dropSlot(viewer.Key, slot)
	select {
	case slot.ch <- struct{}{}:
		defer func() { <-slot.ch }()
	case <-waiting.Done():
		return diffView{Shown: true, Error: "Another preview of yours is still running (previews share your Git folder, one at a time): reload in a moment."}
	}
	s.queued.Add(1)
	select {
	case s.previews <- struct{}{}:
		s.queued.Add(-1)
		defer func() { <-s.previews }()
	case <-waiting.Done():
		s.queued.Add(-1)
		return diffView{Shown: true, Error: fmt.Sprintf("The dashboard is running as many previews as it may (%d at once, for everyone): reload in a moment.", cap(s.previews))}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.PreviewTimeout) // from when it starts
	defer cancel()
	p, err := viewer.Preview(ctx, app.DeepCopy())
	if err != nil {
		var phaseErr *reconcile.PhaseError
		if errors.As(err, &phaseErr) {
			return diffView{Shown: true, Error: appview.OneLine(fmt.Sprintf("The preview's %s phase failed (%s): %v", phaseErr.Phase, phaseErr.Reason, phaseErr.Err))}
		}
		return diffView{Shown: true, Error: appview.OneLine("The preview failed: " + err.Error())}
	}
	sections, err := diffreport.Sections(p)
	if err != nil {
		return diffView{Shown: true, Error: appview.OneLine("The preview could not be shown: " + err.Error())}
	}
	return diffView{Shown: true, Sections: sections, Summary: diffreport.Summary(p)}
}

// refusal says what could not be done with the viewer's rights and why.
func refusal(what string, err error) string {
	if apierrors.IsForbidden(err) {
		return "Your Kubernetes rights do not let you " + what + ": " + appview.OneLine(appview.APIMessage(err))
	}
	if apierrors.IsNotFound(err) {
		return "Could not " + what + ": it does not exist (or was deleted)."
	}
	return "Could not " + what + ": " + appview.OneLine(appview.APIMessage(err))
}

func statusOf(err error) int {
	switch {
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	case apierrors.IsNotFound(err):
		return http.StatusNotFound
	case apierrors.IsConflict(err):
		return http.StatusConflict
	}
	return http.StatusBadGateway
}

func joinErrors(a, b string) string {
	if a == "" {
		return b
	}
	return a + " " + b
}

// previewSlot lets one preview of a viewer run at a time; users counts
// the requests that hold or wait for it, so that it is forgotten when
// none does (a slot per viewer ever seen would grow without bound).
type previewSlot struct {
	ch    chan struct{}
	users int
}

// takeSlot is the viewer's preview slot, counted as used until dropSlot.
func (s *Server) takeSlot(viewer string) *previewSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := s.slots[viewer]
	if slot == nil {
		slot = &previewSlot{ch: make(chan struct{}, 1)}
		s.slots[viewer] = slot
	}
	slot.users++
	return slot
}

// dropSlot ends a use of the viewer's slot, and forgets it after the last.
func (s *Server) dropSlot(viewer string, slot *previewSlot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot.users--; slot.users == 0 && s.slots[viewer] == slot {
		delete(s.slots, viewer)
	}
}
