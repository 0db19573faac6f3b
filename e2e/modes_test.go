package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// A rolling update from leader election to shards (the chart's shards: 0
// → N), and back, runs both modes at once for a while: a member takes no
// slot while a leader of its group ticks, and a new leader ticks nothing
// while members of its group hold slots. The App is ticked throughout by
// one replica at a time, and converges after each change of mode.
func TestModesOfOneGroupNeverTickTogether(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	const group = "plumb-e2e-modes"
	common := []string{"--leader-election-id=" + group, "--leader-election-namespace=" + ns, "--app-label-selector=e2e-shard=modes"}
	var processes []*controllerProcess
	start := func(name string, args ...string) *controllerProcess {
		p := startController(t, name, append(args, common...)...)
		processes = append(processes, p)
		return p
	}
	defer func() {
		for _, p := range processes {
			if t.Failed() {
				t.Logf("log of %s:\n%s", p.logPath, p.tail(40))
			}
			_ = p.stop()
		}
	}()
	logged := func(p *controllerProcess, line string) bool { return strings.Contains(p.tail(100000), line) }
	stop := func(p *controllerProcess) {
		t.Helper()
		if err := p.stop(); err != nil {
			t.Errorf("%s exited with %v on SIGTERM", p.logPath, err)
		}
	}

	leader := start("modes-leader", "--leader-elect=true")
	eventually(t, time.Minute, "the leader to tick", func() (bool, string) { return logged(leader, "Started ticking"), "not yet" })
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "modal", url, func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "modes"} })
	readyAt(t, ns, "modal", first)

	member := start("modes-member", "--shards=auto", "--shard-identity=m")
	eventually(t, time.Minute, "the member to be refused slots while the leader ticks", func() (bool, string) {
		return logged(member, "holds the group's Lease and ticks every App"), "not yet"
	})
	if logged(member, "Took slots") {
		t.Fatal("the member took slots while the leader ticks")
	}
	stop(leader)
	eventually(t, time.Minute, "the member to take the slots once the leader stopped", func() (bool, string) {
		return logged(member, "Took slots"), "not yet"
	})
	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "red")})
	requestSync(t, ns, "modal")
	if app := readyAt(t, ns, "modal", second); app.Status.Shard != "m" {
		t.Errorf("the App at %s was ticked by %q, want the member m", second, app.Status.Shard)
	}

	next := start("modes-next-leader", "--leader-elect=true")
	eventually(t, time.Minute, "the new leader to wait for the member", func() (bool, string) {
		return logged(next, "Waiting for the shard members of this group"), "not yet"
	})
	if logged(next, "Started ticking") {
		t.Fatal("the new leader ticks while the member holds slots")
	}
	stop(member)
	eventually(t, time.Minute, "the new leader to tick once the member stopped", func() (bool, string) {
		return logged(next, "Started ticking"), "not yet"
	})
	third := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "green")})
	requestSync(t, ns, "modal")
	readyAt(t, ns, "modal", third)
	// Each mode ticked the App in its turn, never two replicas at once.
	var spans []tickSpan
	ticked := map[string]bool{}
	for id, p := range map[string]*controllerProcess{"leader": leader, "member": member, "next": next} {
		for _, s := range tickSpans(t, id, p.logPath) {
			if s.app == ns+"/modal" {
				spans = append(spans, s)
				ticked[id] = true
			}
		}
	}
	if len(ticked) != 3 {
		t.Errorf("replicas that ticked the App: %v, want the leader, the member and the next leader", ticked)
	}
	slices.SortFunc(spans, func(x, y tickSpan) int { return x.start.Compare(y.start) })
	for i := 1; i < len(spans); i++ {
		for j := range i {
			if spans[j].replica != spans[i].replica && spans[i].start.Before(spans[j].end) {
				t.Errorf("%s ticked the App at %s while %s did (%s to %s)", spans[i].replica, spans[i].start.Format(time.StampMilli),
					spans[j].replica, spans[j].start.Format(time.StampMilli), spans[j].end.Format(time.StampMilli))
			}
		}
	}
}
