package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/shard"
)

// tickSpan is one tick of an App by one replica, from its log: the lines
// "Tick started" and "Tick ended" of one tick id.
type tickSpan struct {
	replica, app string
	start, end   time.Time
}

// tickSpans reads every tick span of a controller's log; a tick whose end
// is not in the log (the process was killed) lasts until the log's end.
func tickSpans(t *testing.T, replica, logPath string) []tickSpan {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spans := map[string]*tickSpan{}
	var last time.Time
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		// time, level, logger, caller, message, fields
		parts := strings.Split(scanner.Text(), "\t")
		if len(parts) < 6 {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", parts[0])
		if err != nil {
			continue
		}
		last = at
		message := parts[len(parts)-2]
		if message != "Tick started" && message != "Tick ended" {
			continue
		}
		var fields struct{ App, Tick string }
		if json.Unmarshal([]byte(parts[len(parts)-1]), &fields) != nil {
			continue
		}
		switch message {
		case "Tick started":
			spans[fields.Tick] = &tickSpan{replica: replica, app: fields.App, start: at}
		case "Tick ended":
			if s := spans[fields.Tick]; s != nil {
				s.end = at
			}
		}
	}
	var out []tickSpan
	for _, s := range spans {
		if s.end.IsZero() {
			s.end = last
		}
		out = append(out, *s)
	}
	return out
}

// appliesSince counts, per App, the ticks of a controller's log that
// applied objects ("Applied objects") at or after since.
func appliesSince(t *testing.T, logPath string, since time.Time) map[string]int {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		parts := strings.Split(scanner.Text(), "\t")
		if len(parts) < 6 || parts[len(parts)-2] != "Applied objects" {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", parts[0])
		if err != nil || at.Before(since.Truncate(time.Millisecond)) {
			continue
		}
		var fields struct{ App string }
		if json.Unmarshal([]byte(parts[len(parts)-1]), &fields) == nil && fields.App != "" {
			out[fields.App]++
		}
	}
	return out
}

// Three controller processes spread 60 Apps over them by Leases: each App
// is ticked by the replica the placement gives it; a replica killed with
// SIGKILL has its Apps taken over (a drift of one of them healed by its
// new owner), a replica stopped gracefully hands its Apps over, a push
// sent to a replica that does not own the App converges, and no App is
// ever ticked by two replicas at once (from every replica's log).
// cachedOnlyTheirSlots waits until each replica's informers hold exactly
// the ConfigMaps plumb manages (of any App: other tests' too) whose slot the
// placement over members gives it: memory per replica falls as replicas
// are added. The Apps of the test render only ConfigMaps, so no informer of
// another kind runs.
func cachedOnlyTheirSlots(t *testing.T, replicas map[string]*controllerProcess, members ...string) {
	t.Helper()
	placed := shard.Place(members, shard.DefaultEpsilon)
	eventually(t, 2*time.Minute, "each replica to cache the objects of its slots, and only those", func() (bool, string) {
		list := &corev1.ConfigMapList{}
		if err := k8s.List(t.Context(), list, client.HasLabels{plumbv1.LabelAppName}); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for _, cm := range list.Items {
			if slot, err := strconv.Atoi(cm.Labels[plumbv1.LabelSlot]); err == nil {
				want[placed[slot]]++
			}
		}
		got := map[string]int{}
		for _, id := range members {
			v, _ := metricOf(t, replicas[id], "plumb_cached_objects")
			got[id] = int(v)
		}
		return maps.Equal(got, want), fmt.Sprintf("cached %v, want %v (of %d ConfigMaps)", got, want, len(list.Items))
	})
}

func TestAppsAreSpreadOverReplicasAndHandedOver(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	group := "plumb-" + ns
	const apps = 60
	files := map[string]string{}
	for i := range apps {
		files[fmt.Sprintf("apps/app-%d/config.yaml", i)] = configMapYAML(fmt.Sprintf("config-%d", i), "blue")
	}
	w, url, first := gitRepo(t, files)
	replicas := map[string]*controllerProcess{}
	for _, id := range []string{"a", "b", "c"} {
		replicas[id] = startController(t, "shard-"+id, "--shards=auto", "--shard-identity="+id, "--leader-election-id="+group,
			"--leader-election-namespace="+ns, "--app-label-selector=e2e-shard=shards")
	}
	defer func() {
		for _, p := range replicas {
			_ = p.stop()
		}
	}()
	names := make([]string, apps)
	for i := range apps {
		names[i] = fmt.Sprintf("app-%d", i)
		createApp(t, ns, names[i], url, func(a *plumbv1.App) {
			a.Labels = map[string]string{"e2e-shard": "shards"}
			a.Spec.Source.Path = fmt.Sprintf("apps/app-%d", i)
		})
	}
	owners := func() map[string]string {
		list := &plumbv1.AppList{}
		if err := k8s.List(t.Context(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, a := range list.Items {
			if r := findCondition(&a, plumbv1.ConditionReady); r.Status == metav1.ConditionTrue && strings.HasSuffix(a.Status.LastAppliedRevision, first) {
				out[a.Name] = a.Status.Shard
			}
		}
		return out
	}
	// placedOn waits until every App is Ready and ticked last by the member
	// the placement over members gives it.
	placedOn := func(members ...string) map[string]string {
		t.Helper()
		placed := shard.Place(members, shard.DefaultEpsilon)
		var got map[string]string
		eventually(t, 3*time.Minute, fmt.Sprintf("every App ticked by its owner among %v", members), func() (bool, string) {
			got = owners()
			wrong := 0
			for _, name := range names {
				if got[name] != placed[shard.SlotOf(ns, name)] {
					wrong++
				}
			}
			return wrong == 0, fmt.Sprintf("%d of %d Apps not yet Ready at their owner", wrong, apps)
		})
		return got
	}
	count := func(owned map[string]string) map[string]int {
		out := map[string]int{}
		for _, o := range owned {
			out[o]++
		}
		return out
	}
	three := placedOn("a", "b", "c")
	t.Logf("60 Apps on three replicas: %v", count(three))
	for _, id := range []string{"a", "b", "c"} {
		if count(three)[id] == 0 {
			t.Errorf("replica %s ticks no App", id)
		}
	}
	cachedOnlyTheirSlots(t, replicas, "a", "b", "c")

	// kill -9: the others take b's Apps once its Lease has expired, and heal
	// a drift of one of them.
	killedAt := time.Now()
	if err := replicas["b"].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-replicas["b"].exited
	killed := replicas["b"]
	delete(replicas, "b")
	two := placedOn("a", "c")
	cachedOnlyTheirSlots(t, replicas, "a", "c")
	t.Logf("takeover after SIGKILL: every App ticked at its new owner %s after the kill (the Lease lasts 15s; measured by polling)", time.Since(killedAt).Round(100*time.Millisecond))
	var victim string
	for _, name := range names {
		if three[name] == "b" {
			victim = name
			break
		}
	}
	t.Logf("after b was killed: %v; drifting %s (now %s's)", count(two), victim, two[victim])
	cm := fmt.Sprintf("config-%s", strings.TrimPrefix(victim, "app-"))
	drifted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cm}}
	if err := k8s.Patch(t.Context(), drifted, client.RawPatch(types.MergePatchType, []byte(`{"data":{"color":"drifted"}}`)), client.FieldOwner("kubectl-patch")); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the drift of "+cm+" to be healed by its new owner", func() (bool, string) {
		got, _ := getConfigMap(t, ns, cm)
		return got.Data["color"] == "blue", got.Data["color"]
	})

	// A push sent to a's receiver reaches an App that c ticks.
	var ofC string
	for _, name := range names {
		if two[name] == "c" {
			ofC = name
			break
		}
	}
	if ofC == "" {
		t.Fatalf("c ticks no App: %v", count(two))
	}
	i := strings.TrimPrefix(ofC, "app-")
	second := commit(t, w, map[string]string{"apps/" + ofC + "/config.yaml": configMapYAML("config-"+i, "pushed")})
	secondPushedAt := time.Now()
	headers, body := githubPush(t, url, ns+"-second")
	if code, answer, err := sendHookTo(replicas["a"].webhookAddr, "github", headers, body); err != nil || code != http.StatusAccepted {
		t.Fatalf("the push to replica a: %d %q %v", code, answer, err)
	}
	readyAt(t, ns, ofC, second)
	if got, _ := getConfigMap(t, ns, "config-"+i); got.Data["color"] != "pushed" {
		t.Errorf("config-%s after the push to a non-owner: %v, want color pushed", i, got.Data)
	}
	// The push named every App (one repository): each answers it before
	// the next commit, or a late tick of this push would read that commit
	// and be a second webhook tick of it.
	eventually(t, 2*time.Minute, "every App to answer the push to a", func() (bool, string) {
		list := &plumbv1.AppList{}
		if err := k8s.List(t.Context(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		waiting := []string{}
		for _, a := range list.Items {
			request := a.Annotations[plumbv1.AnnotationSyncRequestedAt]
			at, err := time.Parse(time.RFC3339Nano, request)
			if err != nil || at.Before(secondPushedAt) || a.Status.LastHandledSyncRequest != request {
				waiting = append(waiting, a.Name)
			}
		}
		return len(list.Items) == apps && len(waiting) == 0, fmt.Sprintf("%d Apps, waiting for %v", len(list.Items), waiting)
	})

	// A graceful stop hands a's Apps over to c, while a push that changes
	// every App is under way: each App applies it once, by a or by c.
	changed := map[string]string{}
	for i := range apps {
		changed[fmt.Sprintf("apps/app-%d/config.yaml", i)] = configMapYAML(fmt.Sprintf("config-%d", i), "handed-over")
	}
	third := commit(t, w, changed)
	pushedAt := time.Now()
	headers, body = githubPush(t, url, ns+"-third")
	if code, answer, err := sendHookTo(replicas["c"].webhookAddr, "github", headers, body); err != nil || code != http.StatusAccepted {
		t.Fatalf("the push to replica c: %d %q %v", code, answer, err)
	}
	stoppedAt := time.Now()
	if err := replicas["a"].stop(); err != nil {
		t.Errorf("replica a did not stop gracefully on SIGTERM (killed, or a failed exit), so this is no graceful handover: %v", err)
	}
	stopped := replicas["a"]
	delete(replicas, "a")
	eventually(t, 2*time.Minute, "c to tick every App", func() (bool, string) {
		list := &plumbv1.AppList{}
		if err := k8s.List(t.Context(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range list.Items {
			if a.Status.Shard == "c" {
				n++
			}
		}
		return n == apps, fmt.Sprintf("%d of %d", n, apps)
	})
	t.Logf("handover after a graceful stop: every App ticked by c %s after the stop began (measured by polling)", time.Since(stoppedAt).Round(100*time.Millisecond))
	for _, name := range names {
		readyAt(t, ns, name, third)
	}
	applies := map[string]int{}
	for _, p := range []*controllerProcess{stopped, replicas["c"]} {
		for app, n := range appliesSince(t, p.logPath, pushedAt) {
			applies[app] += n
		}
	}
	for _, name := range names {
		if n := applies[ns+"/"+name]; n != 1 {
			t.Errorf("%s applied the pushed commit %d times over the handover, want once", name, n)
		}
	}
	// No tick lost or doubled over the handover: each App's status records
	// one tick of the push (its webhook trigger) at the pushed commit, by a
	// or by c.
	list := &plumbv1.AppList{}
	if err := k8s.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Items {
		var pushTicks []string
		for _, tick := range a.Status.RecentTicks {
			if tick.Trigger == "webhook" && strings.HasSuffix(tick.Revision, third) {
				pushTicks = append(pushTicks, fmt.Sprintf("by %s at %s (%s)", tick.Shard, tick.Start.UTC().Format(time.RFC3339), tick.Result))
			}
		}
		if len(pushTicks) != 1 {
			t.Errorf("%s recorded %d ticks of the push (trigger webhook, revision %s) over the handover, want one: %v", a.Name, len(pushTicks), third, pushTicks)
		}
	}

	// Never two replicas on one App at once.
	var spans []tickSpan
	for id, p := range map[string]*controllerProcess{"a": stopped, "b": killed, "c": replicas["c"]} {
		spans = append(spans, tickSpans(t, id, p.logPath)...)
	}
	byApp := map[string][]tickSpan{}
	for _, s := range spans {
		if strings.HasPrefix(s.app, ns+"/") {
			byApp[s.app] = append(byApp[s.app], s)
		}
	}
	if len(byApp) != apps {
		t.Errorf("the logs show ticks of %d Apps, want %d", len(byApp), apps)
	}
	for app, list := range byApp {
		slices.SortFunc(list, func(x, y tickSpan) int { return x.start.Compare(y.start) })
		for i := 1; i < len(list); i++ {
			for j := range i {
				if list[j].replica != list[i].replica && list[i].start.Before(list[j].end) {
					t.Errorf("%s: replica %s ticked it at %s while %s did (%s to %s)", app, list[i].replica,
						list[i].start.Format(time.StampMilli), list[j].replica, list[j].start.Format(time.StampMilli), list[j].end.Format(time.StampMilli))
				}
			}
		}
	}
}
