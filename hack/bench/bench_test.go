package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/shard"
)

// TestSmallestScenarioCountsWhatItShould runs the quick harness's per-tick
// scenarios once on a small App, against the real control plane and Git
// server, and asserts the counts they report (never times): an unchanged
// timer tick of plumb makes no request, by its own count and by
// kube-apiserver's, while flux_style and naive make two per object; a
// drift tick asks Git nothing; a commit that changes 5 objects writes those
// 5 and rewrites nothing else; a restarted controller asks nothing about
// unchanged objects; webhooks after pushes are matched and applied; a cold
// sync of several Apps creates every object.
func TestSmallestScenarioCountsWhatItShould(t *testing.T) {
	ctx := context.Background()
	const objects = 40
	w, err := newWorld(ctx, t.Logf)
	if err != nil {
		t.Fatalf("starting the bench's world: %v", err)
	}
	defer w.close()
	s, err := newSteadyApp(ctx, w, objects, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", s.ctl.tail(40))
		}
		s.close()
	}()

	noop, err := measureNoop(ctx, s, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if got := noop.requests["plumb"]; len(got) != 1 || got[0] != 0 {
		t.Errorf("plumb's unchanged tick: %v requests per object by its own count, want [0]", got)
	}
	if got := noop.serverRequests["plumb"]; len(got) != 1 || got[0] != 0 {
		t.Errorf("plumb's unchanged tick: %v requests per object by kube-apiserver's count, want [0]", got)
	}
	for _, name := range []string{"flux_style", "naive"} {
		client, server := noop.requests[name], noop.serverRequests[name]
		if len(client) != 1 || client[0] < 2 {
			t.Errorf("%s's unchanged tick: %v requests per object, want at least 2 (a GET and a dry-run each)", name, client)
		}
		if len(server) != 1 || len(client) != 1 || server[0] != client[0] {
			t.Errorf("%s: kube-apiserver counted %v requests per object, the client %v", name, server, client)
		}
	}

	drift, err := measureDrift(ctx, s, 2, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(drift.gitRequests) != 2 || drift.gitRequests[0] != 0 || drift.gitRequests[1] != 0 {
		t.Errorf("Git requests of drift ticks = %v, want [0 0]", drift.gitRequests)
	}

	writes, err := measureWrites(ctx, s, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plumb", "flux_style", "naive"} {
		if got := writes.writesPerChanged[name]; len(got) != 1 || got[0] != 1 {
			t.Errorf("%s: %v writes per changed object, want [1]", name, got)
		}
		if got := writes.rewritten[name]; len(got) != 1 || got[0] != 0 {
			t.Errorf("%s: %v unchanged objects rewritten, want [0]", name, got)
		}
	}

	restart, err := measureRestart(ctx, s, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// None per object: what may come is the App's own status write (a
	// restarted controller cannot vouch for the status it finds, and writes
	// it once), the credentials Secret's first read (when the tick comes
	// before the Secret's watch has listed it) and the odd request of its
	// start.
	if got := restart["plumb"]; len(got) != 1 || got[0]*objects > 3 {
		t.Errorf("the first tick after a restart: %v requests per object (%d objects), want at most 3 in all", got, objects)
	}

	// Each push must be announced to, and matched by, the controller
	// (sendGitHubPush fails otherwise) and applied in full.
	seconds, err := measureWebhook(ctx, w, s.ctl, 2, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(seconds) != 2 {
		t.Errorf("%d pushes measured, want 2", len(seconds))
	}

	// Every object of the cold sync must be created (measureColdSync
	// waits for each).
	cold, err := measureColdSync(ctx, s, 5, 2, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if cold.requests < 1 {
		t.Errorf("the cold sync made %v requests per object, want at least 1 (its apply)", cold.requests)
	}

	// Every App of the managed-memory scenario must become Ready with all
	// its objects (measureManaged counts them), and argo_style must cache
	// them all.
	managed, err := measureManaged(ctx, w, 2, 5, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if managed.jsonBytes <= 0 {
		t.Errorf("the managed objects grew by %v bytes of JSON, want more than 0", managed.jsonBytes)
	}
}

func TestInsertBeforeKeepsTheScenariosOrder(t *testing.T) {
	results := []result{{Key: "a"}, {Key: "c"}}
	got := insertBefore(results, "c", result{Key: "b"})
	got = insertBefore(got, "none", result{Key: "d"})
	var keys string
	for _, r := range got {
		keys += r.Key
	}
	if keys != "abcd" {
		t.Errorf("keys in order %q, want abcd", keys)
	}
}

// TestShardsScenarioCountsWhatItShould runs the shards scenario on a tiny
// fleet and checks its counts: every App is synced on one and on three
// replicas; one replica caches every object of the fleet, three split them
// without overlap; before a replica stops, every App is at the owner the
// placement over three gives it, and after, at the owner the placement over
// two gives it, so the Apps moved are those the placement moves.
func TestShardsScenarioCountsWhatItShould(t *testing.T) {
	ctx := context.Background()
	size := shardSizes{Apps: 24, PerApp: 2, Interval: 10 * time.Second}
	w, err := newWorld(ctx, t.Logf)
	if err != nil {
		t.Fatalf("starting the bench's world: %v", err)
	}
	defer w.close()
	f, err := measureShards(ctx, w, size, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.runs) != 2 || f.runs[0].replicas != 1 || f.runs[1].replicas != 3 {
		t.Fatalf("runs = %+v, want one of 1 replica and one of 3", f.runs)
	}
	objects := float64(size.Apps * size.PerApp)
	if got := f.runs[0].cached; len(got) != 1 || got[0] != objects {
		t.Errorf("one replica caches %v objects, want [%v]", got, objects)
	}
	total := 0.0
	for _, n := range f.runs[1].cached {
		total += n
		if n >= objects {
			t.Errorf("a replica of three caches %v objects, all %v of the fleet", n, objects)
		}
	}
	if len(f.runs[1].cached) != 3 || total != objects {
		t.Errorf("three replicas cache %v objects, want %v in all", f.runs[1].cached, objects)
	}
	for _, run := range f.runs {
		if run.steadyTicks == 0 || run.cold <= 0 {
			t.Errorf("%d replicas: %v ticks in an interval, cold sync %vs", run.replicas, run.steadyTicks, run.cold)
		}
	}
	three := shard.Place([]string{"r0", "r1", "r2"}, shard.DefaultEpsilon)
	two := shard.Place([]string{"r0", "r1"}, shard.DefaultEpsilon)
	before, after := f.owners[0], f.owners[1]
	moved := 0
	for a := range size.Apps {
		name := fmt.Sprintf("shard-%05d", a)
		slot := shard.SlotOf(f.ns, name)
		if before[name] != three[slot] || after[name] != two[slot] {
			t.Errorf("%s (slot %d): owner %q then %q, want %q then %q", name, slot, before[name], after[name], three[slot], two[slot])
		}
		if three[slot] != two[slot] {
			moved++
		}
	}
	if want := float64(moved) / float64(size.Apps); f.moved != want {
		t.Errorf("moved fraction %v, want %v", f.moved, want)
	}
	writeShards(io.Discard, f)
}
