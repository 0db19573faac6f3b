package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
)

// gitRequests is every request the Git server has had for the repository
// that a read makes (ls-remote and fetch; pushes are the bench's own).
func (s *steadyApp) gitRequests() int {
	counts := s.w.git.RequestCounts(s.repo.name)
	return counts[gittest.RequestListRefs] + counts[gittest.RequestFetch]
}

// driftSpacing is the least time between two drifts.
const driftSpacing = 1100 * time.Millisecond

// driftFigures are scenario 2 and 7: drift ticks ask Git nothing, and heal
// quickly.
type driftFigures struct {
	gitRequests []float64
	healSeconds []float64
}

// driftInterval is the App's fallback interval while drifts are measured.
const driftInterval = 10 * time.Minute

// measureDrift changes an owned ConfigMap by hand drifts times and
// measures, for each, the time from the change's response to the watch
// event of plumb's corrective apply, and the Git requests of the tick that
// the drift brought forward.
func measureDrift(ctx context.Context, s *steadyApp, drifts int, logf func(string, ...any)) (f *driftFigures, err error) {
	clientset, err := kubernetes.NewForConfig(s.w.cluster.Config)
	if err != nil {
		return nil, err
	}
	configMaps := clientset.CoreV1().ConfigMaps(s.ns)
	f = &driftFigures{}
	// The fallback timer is moved out of the way meanwhile: a drift that
	// comes when a timer tick is due is folded into that tick, which asks
	// Git, as timer ticks should.
	if err := s.setInterval(ctx, driftInterval); err != nil {
		return nil, fmt.Errorf("moving the timer out of the drifts' way: %w", err)
	}
	defer func() {
		if restoreErr := s.setInterval(ctx, tickInterval); restoreErr != nil && err == nil {
			f, err = nil, fmt.Errorf("restoring the App's interval: %w", restoreErr)
		}
	}()
	logf("Drifting %d owned ConfigMaps by hand, one after the other", drifts)
	var lastDrift time.Time
	for i := range drifts {
		// Event ticks are limited to one a second per App after a burst of
		// five: drifts come a second apart, as separate episodes.
		time.Sleep(time.Until(lastDrift.Add(driftSpacing)))
		// A field that the same manager changes again after three heals
		// within ten minutes is left to it (DriftConflict): each drift is
		// another object's.
		target := fmt.Sprintf("cm-%04d", i%s.objects)
		before, err := s.ctl.counters(ctx)
		if err != nil {
			return nil, err
		}
		gitBefore := s.gitRequests()
		patch := fmt.Sprintf(`{"data":{"value":"hand-%d"}}`, i)
		changed, err := configMaps.Patch(ctx, target, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench-hand"})
		if err != nil {
			return nil, err
		}
		drifted := time.Now()
		lastDrift = drifted
		healed, err := waitConfigMap(ctx, configMaps.Watch, target, changed.ResourceVersion, 30*time.Second, func(cm *corev1.ConfigMap) bool {
			return cm.Data["value"] == "one"
		})
		if err != nil {
			return nil, fmt.Errorf("drift %d was not healed: %w\n%s", i, err, s.ctl.tail(20))
		}
		f.healSeconds = append(f.healSeconds, healed.Sub(drifted).Seconds())
		if _, err := s.ctl.waitTicks(ctx, before.Ticks, 30*time.Second); err != nil {
			return nil, err
		}
		f.gitRequests = append(f.gitRequests, float64(s.gitRequests()-gitBefore))
	}
	return f, nil
}

// waitConfigMap watches one ConfigMap from resourceVersion until done
// holds, and returns when the event arrived.
func waitConfigMap(ctx context.Context, watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	name, resourceVersion string, timeout time.Duration, done func(*corev1.ConfigMap) bool) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := watchFn(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: resourceVersion})
	if err != nil {
		return time.Time{}, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("the watch of %s ended", name)
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && done(cm) {
				return time.Now(), nil
			}
		}
	}
}

func (f *driftFigures) results(drifts int) []result {
	gitGoal, gitMet := goalAtMost(0)
	p50Goal, p50Met := goalAtMost(0.3)
	p99Goal, p99Met := goalAtMost(1)
	return []result{{
		Key: "noop_git_requests_per_drift_tick", Plumb: spreadOf(f.gitRequests), Goal: gitGoal, Met: gitMet,
		Note: "ls-remote and fetch requests the Git server received for the App's repository during a tick that a drift brought forward, the App's fallback timer moved to 10m meanwhile so that no drift comes when a timer tick is due (the baselines have no drift trigger)",
	}, {
		Key: "drift_to_healed_p50_seconds", Plumb: single(percentileOf(f.healSeconds, 50)), Goal: p50Goal, Met: p50Met,
		Note: fmt.Sprintf("%d out-of-band merge patches, each of another owned ConfigMap, %s apart; from the patch's response to the watch event of plumb's corrective apply", drifts, driftSpacing),
	}, {
		Key: "drift_to_healed_p99_seconds", Plumb: single(percentileOf(f.healSeconds, 99)), Goal: p99Goal, Met: p99Met,
	}}
}

// single is a figure measured once (a percentile over one run's samples).
func single(v float64) Spread { return Spread{Median: v, Min: v, Max: v, Runs: 1} }

// writeFigures are scenario 4: a commit that changes 5 objects.
type writeFigures struct {
	writesPerChanged map[string][]float64
	rewritten        map[string][]float64
}

// changedObjects is how many objects each commit of scenario 4 changes.
const changedObjects = 5

// measureWrites pushes runs commits that each change 5 objects, asks for a
// sync, and counts the writes kube-apiserver saw and the objects whose
// resourceVersion moved although Git did not change them; the baselines
// apply the same change to their copy.
func measureWrites(ctx context.Context, s *steadyApp, runs int, logf func(string, ...any)) (*writeFigures, error) {
	f := &writeFigures{writesPerChanged: map[string][]float64{}, rewritten: map[string][]float64{}}
	changed := map[string]bool{}
	for i := range changedObjects {
		changed[fmt.Sprintf("cm-%04d", i*s.objects/changedObjects)] = true
	}
	value := func(run int) func(int) string {
		return func(i int) string {
			if changed[fmt.Sprintf("cm-%04d", i)] {
				return fmt.Sprintf("run-%d", run)
			}
			return "one"
		}
	}
	for run := range runs {
		logf("Commit %d/%d changing %d of %d objects", run+1, runs, changedObjects, s.objects)
		// Counted from before the push: a timer tick may apply the commit
		// before the sync request does.
		before, err := s.resourceVersions(ctx, s.ns)
		if err != nil {
			return nil, err
		}
		writesBefore, err := s.serverWrites(ctx)
		if err != nil {
			return nil, err
		}
		hash, err := s.repo.push(configMaps(s.objects, payloadBytes, value(run)))
		if err != nil {
			return nil, err
		}
		if err := s.w.requestSync(ctx, s.ns, s.name); err != nil {
			return nil, err
		}
		if err := s.w.readyAt(ctx, s.ns, s.name, hash, time.Minute); err != nil {
			return nil, err
		}
		writesAfter, err := s.serverWrites(ctx)
		if err != nil {
			return nil, err
		}
		after, err := s.resourceVersions(ctx, s.ns)
		if err != nil {
			return nil, err
		}
		f.writesPerChanged["plumb"] = append(f.writesPerChanged["plumb"], (writesAfter-writesBefore)/changedObjects)
		f.rewritten["plumb"] = append(f.rewritten["plumb"], float64(rewritten(before, after, changed)))
	}
	// The baselines apply the same commits to their copy, plumb frozen.
	if err := s.ctl.pause(); err != nil {
		return nil, err
	}
	defer s.ctl.resume()
	flux, naive, err := s.writingBaselines()
	if err != nil {
		return nil, err
	}
	for k, name := range []string{"flux_style", "naive"} {
		for run := range runs {
			// Each baseline's commits are new to it: values no one applied yet.
			desired, err := desiredObjects(configMaps(s.objects, payloadBytes, value((k+1)*runs+run)), s.baselineNS)
			if err != nil {
				return nil, err
			}
			before, err := s.resourceVersions(ctx, s.baselineNS)
			if err != nil {
				return nil, err
			}
			writesBefore, err := s.serverWrites(ctx)
			if err != nil {
				return nil, err
			}
			if name == "flux_style" {
				_, err = flux.tick(ctx, desired)
			} else {
				_, err = naive.tick(ctx, desired)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			writesAfter, err := s.serverWrites(ctx)
			if err != nil {
				return nil, err
			}
			after, err := s.resourceVersions(ctx, s.baselineNS)
			if err != nil {
				return nil, err
			}
			f.writesPerChanged[name] = append(f.writesPerChanged[name], (writesAfter-writesBefore)/changedObjects)
			f.rewritten[name] = append(f.rewritten[name], float64(rewritten(before, after, changed)))
		}
	}
	return f, nil
}

func (f *writeFigures) results(objects int) []result {
	baselines := func(m map[string][]float64) map[string]Spread {
		return map[string]Spread{"flux_style": spreadOf(m["flux_style"]), "naive": spreadOf(m["naive"])}
	}
	writesGoal, writesMet := goalAtMost(1)
	rewriteGoal, rewriteMet := goalAtMost(0)
	return []result{{
		Key: "writes_per_changed_object", Plumb: spreadOf(f.writesPerChanged["plumb"]), Baselines: baselines(f.writesPerChanged),
		Goal: writesGoal, Met: writesMet,
		Note: fmt.Sprintf("a commit changing %d of %d ConfigMaps, brought forward by a sync request; ConfigMap writes counted by kube-apiserver (dry runs left out)", changedObjects, objects),
	}, {
		Key: "unchanged_objects_rewritten", Plumb: spreadOf(f.rewritten["plumb"]), Baselines: baselines(f.rewritten),
		Goal: rewriteGoal, Met: rewriteMet,
		Note: "objects whose resourceVersion moved although the commit did not change them",
	}}
}

// measureRestart restarts the controller runs times and counts the
// requests of its first tick (informers' lists and watches, and discovery,
// are made once per kind at start and are left out); the baselines start
// afresh likewise.
func measureRestart(ctx context.Context, s *steadyApp, runs int, logf func(string, ...any)) (map[string][]float64, error) {
	perObject := map[string][]float64{}
	for run := range runs {
		logf("Controller restart %d/%d", run+1, runs)
		s.ctl.stop()
		ctl, err := s.w.startController(ctx, "steady")
		s.ctl = ctl
		if err != nil {
			return nil, err
		}
		c, err := s.ctl.waitTicks(ctx, 0, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		perObject["plumb"] = append(perObject["plumb"], c.TickRequests/float64(s.objects))
	}
	if err := s.ctl.pause(); err != nil {
		return nil, err
	}
	defer s.ctl.resume()
	// Put the baselines' copy back to what s.desired says (scenario 4 left
	// it changed), so that their fresh ticks are unchanged ones too.
	settleFlux, settleNaive, err := s.writingBaselines()
	if err != nil {
		return nil, err
	}
	if _, err := settleFlux.tick(ctx, s.desired); err != nil {
		return nil, err
	}
	if _, err := settleNaive.tick(ctx, s.desired); err != nil {
		return nil, err
	}
	for run := range runs {
		flux, err := newFluxStyle(s.w.cluster.Config, s.w.clientOptions())
		if err != nil {
			return nil, err
		}
		if _, err := flux.tick(ctx, s.desired); err != nil {
			return nil, err
		}
		perObject["flux_style"] = append(perObject["flux_style"], float64(len(flux.requests.Take()))/float64(s.objects))
		naive, err := newNaive(s.w.cluster.Config, s.w.clientOptions())
		if err != nil {
			return nil, err
		}
		if _, err := naive.tick(ctx, s.desired); err != nil {
			return nil, err
		}
		perObject["naive"] = append(perObject["naive"], float64(len(naive.requests.Take()))/float64(s.objects))
		argo, err := newArgoStyle(s.w.cluster.Config)
		if err != nil {
			return nil, err
		}
		if err := argo.watch(ctx, configMapsResource); err != nil {
			argo.close()
			return nil, err
		}
		if _, err := argo.tick(configMapsResource, s.desired); err != nil {
			argo.close()
			return nil, err
		}
		perObject["argo_style"] = append(perObject["argo_style"], float64(len(argo.requests.Take()))/float64(s.objects))
		argo.close()
		logf("Fresh baselines %d/%d", run+1, runs)
	}
	return perObject, nil
}

func restartResult(perObject map[string][]float64, objects int) result {
	goal, met := goalAtMost(0.01)
	b := map[string]Spread{}
	for _, name := range baselineNames {
		b[name] = spreadOf(perObject[name])
	}
	return result{Key: "restart_requests_per_object", Plumb: spreadOf(perObject["plumb"]), Baselines: b, Goal: goal, Met: met,
		Note: fmt.Sprintf("the first tick of a new controller process, %d unchanged objects; informers' lists and watches (one each per kind) are left out for plumb and counted for argo_style, whose restart is a relist", objects)}
}
