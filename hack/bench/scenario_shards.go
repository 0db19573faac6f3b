package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/shard"
)

// shardsLabel marks the Apps of the shards scenario; its value names the
// run, whose controllers tick only those (--app-label-selector).
const shardsLabel = "bench.plumb.dev/shards"

// shardSizes are the shards scenario's.
type shardSizes struct {
	// Apps Apps of PerApp ConfigMaps each tick every Interval.
	Apps, PerApp int
	Interval     time.Duration
}

var (
	fullShardSizes  = shardSizes{Apps: 10000, PerApp: 5, Interval: 3 * time.Minute}
	quickShardSizes = shardSizes{Apps: 300, PerApp: 5, Interval: 30 * time.Second}
)

// shardRun is what one run of the scenario measured: the same fleet,
// from nothing, on one group of replicas.
type shardRun struct {
	replicas int
	// cold is the seconds from the controllers' start until every App was
	// Ready; coldCPU the controllers' CPU seconds meanwhile.
	cold, coldCPU float64
	// steadyCPU is the controllers' CPU seconds over one interval from
	// half an interval after every App was Ready, and steadyTicks the
	// ticks they ran meanwhile.
	steadyCPU, steadyTicks float64
	// heap, rss and cached are per replica: live heap after a collection,
	// resident set, and the objects its informers hold.
	heap, rss, cached []float64
}

// shardFigures are the shards scenario.
type shardFigures struct {
	size shardSizes
	runs []shardRun
	// moved is the fraction of Apps whose owner changed when one of three
	// replicas stopped; movedElsewhere those of them that the stopped
	// replica did not own.
	moved, movedElsewhere float64
	// owners are, by App name, status.shard before and after the stop,
	// and ns the namespace of those Apps.
	owners [2]map[string]string
	ns     string
	// modN is the fraction of Apps that a static label split by a hash of
	// the App modulo the shard count moves from 3 to 2 shards.
	modN float64
	// relabelled is the fraction a static split moves when only the
	// stopped shard's Apps are relabelled, spread over the others.
	relabelled float64
}

// measureShards syncs the fleet from nothing on one replica and then,
// in a fresh namespace, on three (--shards=auto), measuring each; then
// stops one of the three and counts the Apps that changed owner.
func measureShards(ctx context.Context, w *world, size shardSizes, logf func(string, ...any)) (*shardFigures, error) {
	f := &shardFigures{size: size}
	// One file per App (its ConfigMaps as YAML documents): the repository
	// stays under the Read phase's file count limit (20,000 by default).
	files := map[string]string{}
	for a := range size.Apps {
		docs := make([]string, size.PerApp)
		for o := range size.PerApp {
			docs[o] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: s%05d-%d\ndata:\n  value: shards\n", a, o)
		}
		files[fmt.Sprintf("shard-%05d/config.yaml", a)] = strings.Join(docs, "---\n")
	}
	logf("Committing %d Apps of %d ConfigMaps each", size.Apps, size.PerApp)
	r, _, err := w.newRepo(files)
	if err != nil {
		return nil, err
	}
	for _, replicas := range []int{1, 3} {
		run, err := f.measureRun(ctx, w, r, replicas, logf)
		if err != nil {
			return nil, fmt.Errorf("%d replicas: %w", replicas, err)
		}
		f.runs = append(f.runs, run)
	}
	f.modN = modNMoves(size.Apps, 3, 2)
	f.relabelled = stoppedShardShare(size.Apps, 3)
	return f, nil
}

// measureRun creates the fleet in a namespace of its own, starts replicas
// controllers for it and measures them; with more than two it also stops
// the last and counts the Apps moved. It deletes the fleet's ConfigMaps
// at the end, so that the next run's informers do not hold them.
func (f *shardFigures) measureRun(ctx context.Context, w *world, r *repo, replicas int, logf func(string, ...any)) (shardRun, error) {
	run := shardRun{replicas: replicas}
	size := f.size
	ns, err := w.newNamespace(ctx, "bench-shards")
	if err != nil {
		return run, err
	}
	value := fmt.Sprintf("run-%d", replicas)
	logf("Creating %d Apps for %d replicas", size.Apps, replicas)
	err = inParallel(size.Apps, 8, func(a int) error {
		name := fmt.Sprintf("shard-%05d", a)
		return w.createApp(ctx, ns, name, r, size.Interval, func(app *plumbv1.App) {
			app.Spec.Source.Path = "deploy/" + name
			app.Labels = map[string]string{shardsLabel: value}
		})
	})
	if err != nil {
		return run, err
	}
	group := fmt.Sprintf("bench-shards-%d", replicas)
	var ctls []*controllerProcess
	defer func() {
		for _, c := range ctls {
			c.stop()
		}
	}()
	began := time.Now()
	for i := range replicas {
		ctl, err := w.startController(ctx, fmt.Sprintf("%s-%d", group, i), "--shards=auto", fmt.Sprintf("--shard-identity=r%d", i),
			"--leader-election-id="+group, "--leader-election-namespace="+ns, "--app-label-selector", shardsLabel+"="+value)
		if err != nil {
			return run, err
		}
		ctls = append(ctls, ctl)
	}
	pids := make([]int, len(ctls))
	for i, c := range ctls {
		pids[i] = c.pid()
	}
	cpuAt := func() (float64, error) { return cpuOf(pids) }
	logf("Waiting for %d Apps to be Ready on %d replicas", size.Apps, replicas)
	if err := waitFleetReady(ctx, w, ns, size.Apps, 45*time.Minute); err != nil {
		return run, fmt.Errorf("%w\n%s", err, ctls[0].tail(20))
	}
	run.cold = time.Since(began).Seconds()
	cpu, err := cpuAt()
	if err != nil {
		return run, err
	}
	run.coldCPU = cpu // the replicas started with the measure
	time.Sleep(size.Interval / 2)
	ticks := func() (float64, error) {
		total := 0.0
		for _, c := range ctls {
			fams, err := c.metrics(ctx)
			if err != nil {
				return 0, err
			}
			total += sumWhere(fams, "plumb_ticks_total", nil)
		}
		return total, nil
	}
	ticks0, err := ticks()
	if err != nil {
		return run, err
	}
	cpu0, err := cpuAt()
	if err != nil {
		return run, err
	}
	logf("Watching %d replicas for one interval (%s)", replicas, size.Interval)
	time.Sleep(size.Interval)
	ticks1, err := ticks()
	if err != nil {
		return run, err
	}
	cpu1, err := cpuAt()
	if err != nil {
		return run, err
	}
	run.steadyCPU, run.steadyTicks = cpu1-cpu0, ticks1-ticks0
	for _, c := range ctls {
		mem, err := memoryOf(ctx, c)
		if err != nil {
			return run, err
		}
		fams, err := c.metrics(ctx)
		if err != nil {
			return run, err
		}
		run.heap, run.rss = append(run.heap, mem.heap), append(run.rss, mem.rss)
		run.cached = append(run.cached, sumWhere(fams, "plumb_cached_objects", nil))
	}
	if replicas > 2 {
		f.ns = ns
		if err := f.measureLeave(ctx, w, ns, ctls, logf); err != nil {
			return run, err
		}
	}
	for _, c := range ctls {
		c.stop()
	}
	ctls = nil
	logf("Deleting the run's ConfigMaps")
	return run, deleteConfigMaps(ctx, w, ns)
}

// deleteConfigMaps deletes the ConfigMaps plumb applied in ns. A delete of
// tens of thousands outlasts the API server's request timeout (a timeout,
// or a reset stream) while the server goes on deleting: it is asked again
// until none is left.
func deleteConfigMaps(ctx context.Context, w *world, ns string) error {
	deadline := time.Now().Add(15 * time.Minute)
	var lastErr error
	for {
		if err := w.k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{plumbv1.LabelAppName}); err != nil {
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return err // asking again cannot help
			}
			lastErr = err
		}
		left := &corev1.ConfigMapList{}
		err := w.k8s.List(ctx, left, client.InNamespace(ns), client.HasLabels{plumbv1.LabelAppName}, client.Limit(1))
		if err == nil && len(left.Items) == 0 {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ConfigMaps of %s still there after 15 minutes of deleting (last error: %v)", ns, lastErr)
		}
		select { // the server may still be deleting what the last call asked for
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// measureLeave stops the last of ctls gracefully and waits until every
// App is ticked by the owner that the placement over the others gives it
// (status.shard), then counts the Apps whose owner changed.
func (f *shardFigures) measureLeave(ctx context.Context, w *world, ns string, ctls []*controllerProcess, logf func(string, ...any)) error {
	owners := func() (map[string]string, error) {
		list := &plumbv1.AppList{}
		if err := w.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, a := range list.Items {
			out[a.Name] = a.Status.Shard
		}
		return out, nil
	}
	before, err := owners()
	if err != nil {
		return err
	}
	var staying []string
	for i := range len(ctls) - 1 {
		staying = append(staying, fmt.Sprintf("r%d", i))
	}
	leaving := fmt.Sprintf("r%d", len(ctls)-1)
	placed := shard.Place(staying, shard.DefaultEpsilon)
	logf("Stopping replica %s", leaving)
	ctls[len(ctls)-1].stop()
	var after map[string]string
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if after, err = owners(); err != nil {
			return err
		}
		wrong := 0
		for name, owner := range after {
			if owner != placed[shard.SlotOf(ns, name)] {
				wrong++
			}
		}
		if wrong == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d Apps not ticked by their owner among %v after %s stopped", wrong, staying, leaving)
		}
		time.Sleep(time.Second)
	}
	f.owners = [2]map[string]string{before, after}
	moved, elsewhere := 0, 0
	for name, owner := range after {
		if owner != before[name] {
			moved++
			if before[name] != leaving {
				elsewhere++
			}
		}
	}
	f.moved, f.movedElsewhere = float64(moved)/float64(len(after)), float64(elsewhere)/float64(len(after))
	return nil
}

// modNMoves is the fraction of apps Apps (named as the scenario names
// them) whose shard changes when a label split by a hash of the name
// modulo the shard count goes from from to to shards: how a Flux-style
// static split is rebalanced by relabelling.
func modNMoves(apps, from, to int) float64 {
	moved := 0
	for a := range apps {
		h := fnv.New32a()
		_, _ = fmt.Fprintf(h, "shard-%05d", a)
		if h.Sum32()%uint32(from) != h.Sum32()%uint32(to) {
			moved++
		}
	}
	return float64(moved) / float64(apps)
}

// stoppedShardShare is the fraction of apps Apps (named as the scenario
// names them) in the last of shards shards of a split by a hash of the
// name: relabelling just them, spread over the other shards, is the least
// a static split can move when that shard stops.
func stoppedShardShare(apps, shards int) float64 {
	in := 0
	for a := range apps {
		h := fnv.New32a()
		_, _ = fmt.Fprintf(h, "shard-%05d", a)
		if h.Sum32()%uint32(shards) == uint32(shards-1) {
			in++
		}
	}
	return float64(in) / float64(apps)
}

// placedMoves is the fraction of the 256 slots whose member changes when
// the last of three members leaves.
func placedMoves() float64 {
	three, two := shard.Place([]string{"r0", "r1", "r2"}, shard.DefaultEpsilon), shard.Place([]string{"r0", "r1"}, shard.DefaultEpsilon)
	moved := 0
	for slot := range shard.Slots {
		if three[slot] != two[slot] {
			moved++
		}
	}
	return float64(moved) / shard.Slots
}

// writeShards prints the scenario's table: per figure, one replica and
// three, then notes.
func writeShards(out io.Writer, f *shardFigures) {
	one, three := f.runs[0], f.runs[1]
	perApp := func(v float64) string { return formatNumber(v / float64(f.size.Apps)) }
	spread := func(values []float64) string { return formatSpread(spreadOf(values)) }
	perTick := func(r shardRun) string {
		if r.steadyTicks == 0 {
			return "n/a"
		}
		return formatNumber(r.steadyCPU / r.steadyTicks * 1000)
	}
	rows := [][]string{
		{"`shards_cold_sync_seconds`", formatNumber(one.cold), formatNumber(three.cold)},
		{"`shards_cold_cpu_seconds_per_app`", perApp(one.coldCPU), perApp(three.coldCPU)},
		{"`shards_steady_cpu_ms_per_tick`", perTick(one), perTick(three)},
		{"`shards_steady_ticks_per_interval`", formatNumber(one.steadyTicks), formatNumber(three.steadyTicks)},
		{"`shards_live_heap_bytes_per_replica`", spread(one.heap), spread(three.heap)},
		{"`shards_rss_bytes_per_replica`", spread(one.rss), spread(three.rss)},
		{"`shards_cached_objects_per_replica`", spread(one.cached), spread(three.cached)},
	}
	fmt.Fprintf(out, "| figure | 1 replica | 3 replicas |\n|---|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(out, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintf(out, "\n| 3 → 2 replicas | plumb (Leases, consistent hashing) | flux_style, relabelled to hash mod 2 | flux_style, the stopped shard's Apps relabelled |\n|---|---|---|---|\n")
	fmt.Fprintf(out, "| `shards_apps_moved_fraction` | %s (of them owned by a replica that stayed: %s; slots moved by the placement: %s) | %s | %s |\n\n",
		formatNumber(f.moved), formatNumber(f.movedElsewhere), formatNumber(placedMoves()), formatNumber(f.modN), formatNumber(f.relabelled))
	fmt.Fprintf(out, "- %d Apps of %d ConfigMaps each on a %s interval, in a namespace per run, synced from nothing by `plumb controller --shards=auto` on 1 and on 3 replicas (processes on this one machine, so the 3 share its CPUs with each other and with the API server: the CPU and memory per replica are the figures that scale, not the times).\n",
		f.size.Apps, f.size.PerApp, f.size.Interval)
	fmt.Fprintf(out, "- cold: from the replicas' start until every App was Ready; CPU is the replicas' user+system seconds from their start (/proc), divided by the Apps. steady: the replicas' CPU over one interval from half an interval after all were Ready, per tick (plumb_ticks_total).\n")
	fmt.Fprintf(out, "- memory per replica: median (min–max) over the replicas of the live heap after forced collections (least over %s) and the resident set; cached objects: plumb_cached_objects.\n", heapWindow)
	fmt.Fprintf(out, "- 3 → 2: one replica stopped gracefully; the fraction of Apps whose status.shard changed once none was owned by it. flux_style is computed, not run: Flux shards by a label set on each object by hand; relabelling a split of hash mod 3 to hash mod 2 moves the first fraction; relabelling only the stopped shard's Apps, spread over the other two by hand, moves the second (the least any split can move: that shard's Apps), and plumb moves the stopped replica's Apps plus those its placement moves between the others.\n")
}
