package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAPIVerb(t *testing.T) {
	for _, tt := range []struct {
		method, url, contentType, want string
	}{
		{"GET", "/api", "", "discovery"},
		{"GET", "/apis/apps/v1", "", "discovery"},
		{"GET", "/version", "", "discovery"},
		{"GET", "/api/v1/namespaces", "", "list"},
		{"GET", "/api/v1/namespaces/team-a", "", "get"},
		{"GET", "/api/v1/namespaces/team-a/status", "", "get"},
		{"PUT", "/api/v1/namespaces/team-a/finalize", "application/json", "update"},
		{"GET", "/api/v1/namespaces/team-a/configmaps", "", "list"},
		{"GET", "/api/v1/namespaces/team-a/configmaps?watch=true&resourceVersion=5", "", "watch"},
		{"GET", "/api/v1/namespaces/team-a/configmaps/settings", "", "get"},
		{"GET", "/apis/apps/v1/namespaces/team-a/deployments/web/status", "", "get"},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "", "list"},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "", "get"},
		{"PATCH", "/api/v1/namespaces/team-a/configmaps/settings?fieldManager=plumb", "application/apply-patch+yaml", "apply"},
		{"PATCH", "/apis/plumb.dev/v1alpha1/namespaces/team-a/apps/web/status", "application/merge-patch+json", "patch"},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", "create"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/plumb", "application/json", "update"},
		{"DELETE", "/api/v1/namespaces/team-a/configmaps/old", "", "delete"},
		{"DELETE", "/api/v1/namespaces/team-a/configmaps", "", "deletecollection"},
	} {
		req := httptest.NewRequest(tt.method, tt.url, nil)
		req.Header.Set("Content-Type", tt.contentType)
		if got := APIVerb(req); got != tt.want {
			t.Errorf("%s %s: verb %q, want %q", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestInstrumentTransportCountsEveryRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer server.Close()
	client := &http.Client{Transport: m.InstrumentTransport(http.DefaultTransport)}
	send := func(method, path, contentType string) {
		req, _ := http.NewRequest(method, server.URL+path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", contentType)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send("PATCH", "/api/v1/namespaces/a/configmaps/x?dryRun=All&fieldManager=plumb", "application/apply-patch+yaml")
	send("PATCH", "/api/v1/namespaces/a/configmaps/x?fieldManager=plumb", "application/apply-patch+yaml")
	send("PATCH", "/api/v1/namespaces/a/configmaps/y?fieldManager=plumb", "application/apply-patch+yaml")
	send("GET", "/api/v1/namespaces/a/configmaps/x", "")
	for _, tt := range []struct {
		verb, dryRun string
		want         float64
	}{
		{"apply", "true", 1}, {"apply", "false", 2}, {"get", "false", 1}, {"list", "false", 0},
	} {
		if got := testutil.ToFloat64(m.apiRequests.WithLabelValues(tt.verb, tt.dryRun)); got != tt.want {
			t.Errorf("verb=%s dry_run=%s: %v requests, want %v", tt.verb, tt.dryRun, got, tt.want)
		}
	}
	if got := testutil.CollectAndCount(m.apiRequests); got != len(apiVerbs)+1 {
		t.Errorf("%d series, want one per verb at zero plus dry-run applies (%d)", got, len(apiVerbs)+1)
	}
}

// Every phase a hook runs in, the delete hooks' too, is counted with its
// result and duration; a phase or result of no hook is not.
func TestHooksAreCountedByPhaseAndResult(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"PreSync", "Sync", "PostSync", "SyncFail", "PreDelete", "PostDelete"} {
		m.ObserveHook(phase, "Succeeded", time.Second)
		m.ObserveHook(phase, "Failed", time.Second)
		m.ObserveHook(phase, "Failed", time.Second)
		if ok, failed := testutil.ToFloat64(m.hooks.WithLabelValues(phase, "Succeeded")), testutil.ToFloat64(m.hooks.WithLabelValues(phase, "Failed")); ok != 1 || failed != 2 {
			t.Errorf("plumb_hooks_total{phase=%q}: %v succeeded, %v failed; want 1 and 2", phase, ok, failed)
		}
	}
	m.ObserveHook("Skip", "Succeeded", time.Second)
	m.ObserveHook("PreSync", "Running", time.Second)
	if n := testutil.CollectAndCount(m.hooks); n != 12 {
		t.Errorf("plumb_hooks_total has %d series, want the 12 of six phases and two results", n)
	}
	if n := testutil.CollectAndCount(m.hookDuration); n != 6 {
		t.Errorf("plumb_hook_duration_seconds has %d series, want one per phase", n)
	}
}

// A shard member's view is served as gauges, and the slots it moved as a
// counter by action; an unknown action is not counted.
func TestShardsAreObserved(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveShard(3, 86, 20)
	if members, slots, apps := testutil.ToFloat64(m.shardMembers), testutil.ToFloat64(m.shardSlots), testutil.ToFloat64(m.shardApps); members != 3 || slots != 86 || apps != 20 {
		t.Errorf("plumb_shard_members, _slots, _apps = %v, %v, %v; want 3, 86, 20", members, slots, apps)
	}
	m.ObserveSlotMoves("take", 86)
	m.ObserveSlotMoves("release", 5)
	m.ObserveSlotMoves("lost", 1)
	m.ObserveSlotMoves("stolen", 1)
	for action, want := range map[string]float64{"take": 86, "release": 5, "lost": 1} {
		if got := testutil.ToFloat64(m.slotMoves.WithLabelValues(action)); got != want {
			t.Errorf("plumb_shard_slot_moves_total{action=%q} = %v, want %v", action, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.slotMoves); n != 3 {
		t.Errorf("plumb_shard_slot_moves_total has %d series, want 3", n)
	}
}
