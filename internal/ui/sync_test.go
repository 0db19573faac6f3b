package ui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// TestTheAppPageShowsTheOrderedSync: the App page shows where the last
// ordered sync is (phase and wave) and each hook's outcome, with text
// from the cluster escaped, and no section for an App that never had one.
func TestTheAppPageShowsTheOrderedSync(t *testing.T) {
	s, err := New(Options{Identity: Local{}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	wave := int32(2)
	started := metav1.NewTime(now.Add(-90 * time.Second))
	finished := metav1.NewTime(now.Add(-time.Minute))
	sync := &plumbv1.SyncStatus{Revision: "main@sha1:abc", Phase: plumbv1.SyncPhaseSync, Wave: &wave, StartedAt: started,
		Message: "wave 2 waits for Deployment/shop/web", Hooks: []plumbv1.HookStatus{
			{ObjectRef: plumbv1.ObjectRef{Group: "batch", Version: "v1", Kind: "Job", Namespace: "shop", Name: "migrate"}, Phase: "PreSync",
				Status: plumbv1.HookFailed, Message: "<script>alert(1)</script>", StartedAt: started, FinishedAt: &finished},
			{ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "schema"}, Phase: "PreSync", Wave: 1,
				Status: plumbv1.HookSucceeded, StartedAt: started},
		}}
	render := func(sync *plumbv1.SyncStatus) string {
		page := appPage{Found: true, Namespace: "shop", Name: "web", OrderedSync: orderedSyncOf(sync, now)}
		rec := httptest.NewRecorder()
		s.render(rec, http.StatusOK, "app.html", page)
		if rec.Code != http.StatusOK {
			t.Fatalf("rendering: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	body := render(sync)
	for _, want := range []string{`id="ordered-sync-phase">Sync, wave 2</span>`, "started 90s ago", "wave 2 waits for Deployment/shop/web",
		`<th scope="row" data-label="Hook">Job/shop/migrate</th><td data-label="Outcome" class="False">Failed</td>`,
		`<td data-label="Wave">1</td><th scope="row" data-label="Hook">ConfigMap/shop/schema</th><td data-label="Outcome" class="True">Succeeded</td>`,
		"&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the App page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("a hook's message reached the page unescaped")
	}

	sync.Phase, sync.FinishedAt, sync.Failure, sync.Message = plumbv1.SyncPhaseFailed, &finished, "PreSync hook Job/shop/migrate failed", ""
	body = render(sync)
	for _, want := range []string{`class="False" id="ordered-sync-phase">Failed</span>`, "ended 60s ago", "Failed: PreSync hook Job/shop/migrate failed"} {
		if !strings.Contains(body, want) {
			t.Errorf("the failed sync's page lacks %q", want)
		}
	}
	if body := render(nil); strings.Contains(body, "ordered-sync") {
		t.Error("an App without an ordered sync shows the section")
	}
}

// The App page names the replica that ticks the App when Apps are spread
// over replicas, and says nothing of shards otherwise.
func TestTheAppPageNamesItsShard(t *testing.T) {
	s, err := New(Options{Identity: Local{}})
	if err != nil {
		t.Fatal(err)
	}
	for shard, want := range map[string]string{"plumb-1": `<dt>Shard</dt><dd id="shard">plumb-1</dd>`, "": ""} {
		rec := httptest.NewRecorder()
		s.render(rec, http.StatusOK, "app.html", appPage{Found: true, Namespace: "shop", Name: "web", Shard: shard})
		body := rec.Body.String()
		if want != "" && !strings.Contains(body, want) {
			t.Errorf("the page of an App ticked by %s lacks %q", shard, want)
		}
		if want == "" && strings.Contains(body, "Shard") {
			t.Error("the page of an App without a shard mentions one")
		}
	}
}

// The Apps list names the replica that last ticked each App, from
// status.shard, in the page and in the rows the live updates send.
func TestTheAppsListNamesEachAppsShard(t *testing.T) {
	s, err := New(Options{Identity: Local{}})
	if err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	app.Status.Shard = "plumb-2"
	row := rowOf(app, time.Now())
	if row.Shard != "plumb-2" {
		t.Fatalf("row.Shard = %q, want plumb-2", row.Shard)
	}
	encoded, err := json.Marshal(row)
	if err != nil || !strings.Contains(string(encoded), `"shard":"plumb-2"`) {
		t.Errorf("the live row %s (%v) lacks the shard", encoded, err)
	}
	rec := httptest.NewRecorder()
	s.render(rec, http.StatusOK, "apps.html", appsPage{Apps: []appRow{row}})
	if body := rec.Body.String(); !strings.Contains(body, `<th scope="col">Shard</th>`) || !strings.Contains(body, `<td data-label="Shard">plumb-2</td>`) {
		t.Errorf("the Apps list lacks the Shard column or its value:\n%s", body)
	}
}

// The Apps list names the cluster each App deploys into (its kubeconfig
// Secret), in the page and in the rows the live updates send; an App into
// plumb's own cluster shows none.
func TestTheAppsListNamesEachAppsDestination(t *testing.T) {
	s, err := New(Options{Identity: Local{}})
	if err != nil {
		t.Fatal(err)
	}
	into := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	into.Spec.Destination = &plumbv1.Destination{KubeConfig: plumbv1.KubeConfigReference{SecretRef: plumbv1.SecretKeyReference{Name: "cluster-b"}}}
	local := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}
	rows := []appRow{rowOf(into, time.Now()), rowOf(local, time.Now())}
	if rows[0].Destination != "cluster-b" || rows[1].Destination != "" {
		t.Fatalf("rows' destinations %q and %q, want cluster-b and none", rows[0].Destination, rows[1].Destination)
	}
	encoded, err := json.Marshal(rows[0])
	if err != nil || !strings.Contains(string(encoded), `"destination":"cluster-b"`) {
		t.Errorf("the live row %s (%v) lacks the destination", encoded, err)
	}
	rec := httptest.NewRecorder()
	s.render(rec, http.StatusOK, "apps.html", appsPage{Apps: rows})
	body := rec.Body.String()
	if !strings.Contains(body, `<th scope="col">Destination</th>`) || !strings.Contains(body, `<td data-label="Destination">cluster-b</td>`) ||
		!strings.Contains(body, `<td data-label="Destination"></td>`) {
		t.Errorf("the Apps list lacks the Destination column or its values:\n%s", body)
	}
}

// The App page names the cluster an App deploys into, when it is not the
// one plumb runs in.
func TestTheAppPageNamesItsDestination(t *testing.T) {
	s, err := New(Options{Identity: Local{}})
	if err != nil {
		t.Fatal(err)
	}
	for destination, want := range map[string]string{"cluster-b": `<dt>Destination</dt><dd id="destination">the cluster of Secret cluster-b</dd>`, "": ""} {
		rec := httptest.NewRecorder()
		s.render(rec, http.StatusOK, "app.html", appPage{Found: true, Namespace: "shop", Name: "web", Destination: destination})
		body := rec.Body.String()
		if want != "" && !strings.Contains(body, want) {
			t.Errorf("the page of an App into %s lacks %q", destination, want)
		}
		if want == "" && strings.Contains(body, "Destination") {
			t.Error("the page of an App into plumb's own cluster names a destination")
		}
	}
}
