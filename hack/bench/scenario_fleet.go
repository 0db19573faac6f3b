package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// fleetLabel marks the Apps of scenario 11; the fleet's controller ticks
// only those.
const fleetLabel = "bench.plumb.dev/fleet"

// fleetWorkers is the fleet controller's --workers (the default).
const fleetWorkers = 4

// fleetBucket is the width of the buckets ticks are counted in to find the
// peak enqueue rate: wide enough that a bucket holds tens of ticks, so that
// the count is not mostly chance.
const fleetBucket = 5 * time.Second

// fleetFigures are scenario 11.
type fleetFigures struct {
	apps     int
	interval time.Duration
	// drain is, per interval observed, the time the fleet's ticks took,
	// divided among the workers, as a fraction of the interval.
	drain []float64
	// peakToMean is the busiest bucket's ticks over the mean bucket's.
	peakToMean float64
	buckets    []float64
}

// measureFleet creates apps Apps of one ConfigMap each on interval, with a
// controller of their own (--app-label-selector), waits until every one is
// Ready and then half an interval more, then reads the controller's tick
// counter and tick durations every second for periods intervals. The wait
// leaves out the lull after the fleet's first ticks: each App's second tick
// comes at its place in the interval, at least half an interval after its
// first, so the first half interval holds fewer ticks than any later one,
// which would put the mean below what the fleet settles to.
func measureFleet(ctx context.Context, w *world, apps int, interval time.Duration, periods int, logf func(string, ...any)) (*fleetFigures, error) {
	f := &fleetFigures{apps: apps, interval: interval}
	files := map[string]string{}
	for a := range apps {
		name := fmt.Sprintf("fleet-%04d", a)
		files[name+"/cm.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: fleet\n", name)
	}
	r, _, err := w.newRepo(files)
	if err != nil {
		return nil, err
	}
	ns, err := w.newNamespace(ctx, "bench-fleet")
	if err != nil {
		return nil, err
	}
	ctl, err := w.startController(ctx, "fleet", "--app-label-selector", fleetLabel+"=true", "--workers", fmt.Sprint(fleetWorkers))
	if err != nil {
		return nil, err
	}
	defer ctl.stop()
	logf("Creating a fleet of %d Apps of one ConfigMap each, on a %s interval", apps, interval)
	for a := range apps {
		name := fmt.Sprintf("fleet-%04d", a)
		if err := w.createApp(ctx, ns, name, r, interval, func(app *plumbv1.App) {
			app.Spec.Source.Path = "deploy/" + name
			app.Labels = map[string]string{fleetLabel: "true"}
		}); err != nil {
			return nil, err
		}
	}
	if err := waitFleetReady(ctx, w, ns, apps, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, ctl.tail(20))
	}
	time.Sleep(interval / 2)
	logf("Watching the fleet's ticks for %d intervals", periods)
	type sample struct {
		at             time.Time
		ticks, seconds float64
	}
	read := func() (sample, error) {
		fams, err := ctl.metrics(ctx)
		if err != nil {
			return sample{}, err
		}
		return sample{at: time.Now(), ticks: sumWhere(fams, "plumb_ticks_total", nil),
			seconds: sumWhere(fams, "plumb_tick_duration_seconds", nil)}, nil
	}
	first, err := read()
	if err != nil {
		return nil, err
	}
	samples := []sample{first}
	end := first.at.Add(time.Duration(periods) * interval)
	for time.Now().Before(end) {
		time.Sleep(time.Until(samples[len(samples)-1].at.Add(time.Second)))
		s, err := read()
		if err != nil {
			return nil, err
		}
		samples = append(samples, s)
	}
	f.buckets = make([]float64, int(time.Duration(periods)*interval/fleetBucket))
	periodSeconds := make([]float64, periods)
	for i := 1; i < len(samples); i++ {
		offset := samples[i].at.Sub(first.at)
		f.buckets[min(int(offset/fleetBucket), len(f.buckets)-1)] += samples[i].ticks - samples[i-1].ticks
		periodSeconds[min(int(offset/interval), periods-1)] += samples[i].seconds - samples[i-1].seconds
	}
	for _, s := range periodSeconds {
		f.drain = append(f.drain, s/fleetWorkers/interval.Seconds())
	}
	total, peak := 0.0, 0.0
	for _, n := range f.buckets {
		total += n
		peak = math.Max(peak, n)
	}
	f.peakToMean = math.NaN()
	if total > 0 {
		f.peakToMean = peak / (total / float64(len(f.buckets)))
	}
	return f, nil
}

// waitFleetReady waits until apps Apps of ns are Ready.
func waitFleetReady(ctx context.Context, w *world, ns string, apps int, timeout time.Duration) error {
	ready := 0
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list := &plumbv1.AppList{}
		if err := w.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		ready = 0
		for _, app := range list.Items {
			if apimeta.IsStatusConditionTrue(app.Status.Conditions, plumbv1.ConditionReady) {
				ready++
			}
		}
		return ready == apps, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d Apps Ready: %w", ready, apps, err)
	}
	return nil
}

// results are scenario 11's rows.
func (f *fleetFigures) results() []result {
	drainGoal, drainMet := goalAtMost(0.25)
	peakGoal, peakMet := goalAtMost(1.5)
	counts := make([]string, len(f.buckets))
	for i, n := range f.buckets {
		counts[i] = formatNumber(n)
	}
	return []result{{
		Key: "queue_drain_fraction_of_interval", Plumb: spreadOf(f.drain), Goal: drainGoal, Met: drainMet,
		Note: fmt.Sprintf("%d Apps of one ConfigMap each, %s interval, a controller of their own with %d workers, from half an interval after all were Ready: per interval, the seconds its ticks took (plumb_tick_duration_seconds) divided among the workers, as a fraction of the interval — the time the queue takes to empty if every tick of the interval came due at once; median (min–max) of %d intervals",
			f.apps, f.interval, fleetWorkers, len(f.drain)),
	}, {
		Key: "enqueue_peak_to_mean", Plumb: single(f.peakToMean), Goal: peakGoal, Met: peakMet,
		Note: fmt.Sprintf("ticks (plumb_ticks_total, read every second, from half an interval after all Apps were Ready) per %s over %d intervals, busiest %s over the mean: %s",
			fleetBucket, len(f.drain), fleetBucket, strings.Join(counts, " ")),
	}}
}
