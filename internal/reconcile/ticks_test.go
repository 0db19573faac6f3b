package reconcile

import (
	"context"
	"strings"
	"testing"

	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// TestRecentTicks: status.recentTicks records each tick with what brought
// it, how it ended and how long each phase took; ticks whose status write
// was skipped (only times changed) are written with the next write, not
// lost; a failed phase is the last one timed.
func TestRecentTicks(t *testing.T) {
	w, repo := newRepo(t, map[string]string{"deploy/cm.yaml": configMapYAML("web")})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if n := len(got.Status.RecentTicks); n != 1 {
		t.Fatalf("%d recent ticks after the first, want 1: %+v", n, got.Status.RecentTicks)
	}
	first := got.Status.RecentTicks[0]
	if first.Result != plumbv1.ReasonSucceeded || first.FailedPhase != "" || first.Changed != 1 || first.Trigger != string(TriggerSpec) ||
		first.Revision != got.Status.LastAppliedRevision || first.Start.IsZero() {
		t.Errorf("the first tick's record = %+v, want Succeeded, 1 changed, trigger %s, revision %s", first, TriggerSpec, got.Status.LastAppliedRevision)
	}
	for name, ms := range map[string]*int64{"read": first.ReadMillis, "observe": first.ObserveMillis, "diff": first.DiffMillis, "apply": first.ApplyMillis} {
		if ms == nil || *ms < 0 || *ms > first.TotalMillis {
			t.Errorf("the %s phase's duration = %v, want one between 0 and the tick's %d ms", name, ms, first.TotalMillis)
		}
	}

	// Twelve unchanged ticks: most go unwritten, but the heartbeat that
	// writes carries them all.
	var written *plumbv1.App
	for i := 0; i < 12; i++ {
		got = h.tick(t, key, queue.WakeEvent)
		if len(got.Status.RecentTicks) == plumbv1.MaxRecentTicks && written == nil {
			written = got
		}
	}
	if written == nil {
		t.Fatalf("no status write in 12 unchanged ticks carried %d ticks: %d", plumbv1.MaxRecentTicks, len(got.Status.RecentTicks))
	}
	for i, rec := range written.Status.RecentTicks[1:] {
		if rec.Trigger != string(TriggerDrift) || rec.Result != plumbv1.ReasonSucceeded || rec.Changed != 0 {
			t.Errorf("unchanged tick %d = %+v, want a Succeeded drift check that changed nothing", i+1, rec)
		}
		if prev := written.Status.RecentTicks[i]; rec.Start.Before(&prev.Start) {
			t.Errorf("ticks out of order: %v after %v", rec.Start, prev.Start)
		}
	}

	// A write that a tick did not bring (the App suspended) carries the
	// ticks that the heartbeat left unwritten.
	// An unchanged tick that goes unwritten (one of the next few: all but
	// the heartbeat's).
	var unwritten *plumbv1.App
	var remembered []plumbv1.TickRecord
	for range heartbeatEvery {
		unwritten = h.tick(t, key, queue.WakeTimer)
		if remembered = h.r.memory.ticksOf(key); summary(unwritten.Status.RecentTicks) != summary(remembered) {
			break
		}
	}
	if summary(unwritten.Status.RecentTicks) == summary(remembered) {
		t.Fatalf("%d unchanged ticks in a row were all written: the heartbeat writes only every %dth", heartbeatEvery, heartbeatEvery)
	}
	suspend := client.MergeFrom(unwritten.DeepCopy())
	unwritten.Spec.Suspend = true
	if err := admin(t).Patch(context.Background(), unwritten, suspend); err != nil {
		t.Fatal(err)
	}
	appCached(t, h, key, true)
	got = h.tick(t, key, queue.WakeEvent)
	if !got.Spec.Suspend || summary(got.Status.RecentTicks) != summary(remembered) {
		t.Errorf("the suspended App's status write carries ticks\n%s\nwant the remembered, the unwritten one last:\n%s", summary(got.Status.RecentTicks), summary(remembered))
	}
	resume := client.MergeFrom(got.DeepCopy())
	got.Spec.Suspend = false
	if err := admin(t).Patch(context.Background(), got, resume); err != nil {
		t.Fatal(err)
	}
	appCached(t, h, key, false)

	// A tick that fails in Read times Read and nothing after it, and names
	// no revision (it read none).
	pushed(t, w, map[string]string{"deploy/bad.yaml": "a: [unclosed"})
	got = h.tick(t, key, queue.WakeTimer)
	last := got.Status.RecentTicks[len(got.Status.RecentTicks)-1]
	if len(got.Status.RecentTicks) != plumbv1.MaxRecentTicks {
		t.Errorf("%d recent ticks, want at most %d", len(got.Status.RecentTicks), plumbv1.MaxRecentTicks)
	}
	if last.FailedPhase != "Read" || last.Result == plumbv1.ReasonSucceeded || last.ReadMillis == nil || last.ObserveMillis != nil || last.ApplyMillis != nil || last.Revision != "" {
		t.Errorf("the failed tick's record = %+v, want a failed Read, timed, no later phase and no revision", last)
	}

	// One refused after its Read (an empty render, which the prune guard
	// refuses: an Apply failure) names the revision and times no Observe.
	empty := pushed(t, w, map[string]string{"deploy/bad.yaml": "", "deploy/cm.yaml": "", "deploy/README.md": "Nothing here yet.\n"})
	got = h.tick(t, key, queue.WakeTimer)
	last = got.Status.RecentTicks[len(got.Status.RecentTicks)-1]
	if last.FailedPhase != "Apply" || !strings.HasSuffix(last.Revision, empty) || last.ReadMillis == nil || last.ObserveMillis != nil || last.DiffMillis != nil {
		t.Errorf("the refused empty render's record = %+v, want a failed Apply at %s, only Read timed", last, empty)
	}
	// The refusal is Apply's guard, made ahead of it: the tick ends in the
	// phase its error names, and times it.
	if last.ApplyMillis == nil {
		t.Errorf("the refused empty render's record = %+v, want Apply, the phase that refused, timed", last)
	}
}

// appCached waits until the harness's App cache holds the App with
// spec.suspend as given.
func appCached(t *testing.T, h *harness, key types.NamespacedName, suspended bool) {
	t.Helper()
	eventually(t, func() bool {
		app := &plumbv1.App{}
		return h.r.Client.Get(context.Background(), key, app) == nil && app.Spec.Suspend == suspended
	})
}

// summary is the ticks as status keeps them (times to the second), one
// per line.
func summary(ticks []plumbv1.TickRecord) string {
	var b strings.Builder
	for _, rec := range ticks {
		fmt.Fprintf(&b, "%d %s %s %d\n", rec.Start.Unix(), rec.Trigger, rec.Result, rec.TotalMillis)
	}
	return b.String()
}
