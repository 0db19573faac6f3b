package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// noopFigures are scenarios 1 and 3: what an unchanged timer tick costs.
type noopFigures struct {
	// requests per managed object, client-side, by contender.
	requests map[string][]float64
	// server-side counts of the same requests, by contender.
	serverRequests map[string][]float64
	// cpu seconds per 1,000 objects per tick, by contender.
	cpu map[string][]float64
	// controllerCPU is the controller's own share of plumb's cpu, per run,
	// and collections the garbage collections it completed in each run.
	controllerCPU, collections []float64
}

// measureNoop runs runs unchanged timer ticks of plumb and of each baseline.
//
// plumb: the controller is frozen (SIGSTOP) for longer than its timer's
// interval while etcd's and kube-apiserver's idle CPU rate is measured;
// thawed, it runs its overdue timer tick at once, and the window from the
// thaw until its tick counter moves is measured: requests (its own count,
// and kube-apiserver's), and the CPU of controller, kube-apiserver and etcd
// minus what the servers use idle over the same time.
func measureNoop(ctx context.Context, s *steadyApp, runs int, logf func(string, ...any)) (*noopFigures, error) {
	f := &noopFigures{requests: map[string][]float64{}, serverRequests: map[string][]float64{}, cpu: map[string][]float64{}}
	perObject := func(v float64) float64 { return v / float64(s.objects) }
	per1000 := func(v float64) float64 { return v * 1000 / float64(s.objects) }
	for run := range runs {
		logf("Unchanged timer tick %d/%d of plumb (%d objects)", run+1, runs, s.objects)
		before, err := s.ctl.counters(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.ctl.pause(); err != nil {
			return nil, err
		}
		idle, err := s.idleServerRate(tickInterval + tickInterval/10 + 500*time.Millisecond)
		if err != nil {
			s.ctl.resume()
			return nil, err
		}
		serverBefore, err := s.serverRequests(ctx)
		if err != nil {
			s.ctl.resume()
			return nil, err
		}
		ownBefore, serversBefore, err := cpuSplit(s.ctl.pid(), s.w.serverPIDs)
		if err != nil {
			s.ctl.resume()
			return nil, err
		}
		thawed := time.Now()
		if err := s.ctl.resume(); err != nil {
			return nil, err
		}
		after, err := s.ctl.waitTicks(ctx, before.Ticks, 2*tickInterval)
		if err != nil {
			return nil, err
		}
		ownAfter, serversAfter, err := cpuSplit(s.ctl.pid(), s.w.serverPIDs)
		if err != nil {
			return nil, err
		}
		window := time.Since(thawed).Seconds()
		serverAfter, err := s.serverRequests(ctx)
		if err != nil {
			return nil, err
		}
		f.requests["plumb"] = append(f.requests["plumb"], perObject(after.Requests-before.Requests))
		f.serverRequests["plumb"] = append(f.serverRequests["plumb"], perObject(serverAfter-serverBefore))
		f.cpu["plumb"] = append(f.cpu["plumb"], per1000(max(0, ownAfter+serversAfter-ownBefore-serversBefore-idle*window)))
		f.controllerCPU = append(f.controllerCPU, per1000(ownAfter-ownBefore))
		f.collections = append(f.collections, after.Collections-before.Collections)
	}

	// The baselines run in this process while plumb's controller is frozen.
	if err := s.ctl.pause(); err != nil {
		return nil, err
	}
	defer s.ctl.resume()
	flux, naive, err := s.writingBaselines()
	if err != nil {
		return nil, err
	}
	argo, err := newArgoStyle(s.w.cluster.Config)
	if err != nil {
		return nil, err
	}
	defer argo.close()
	if _, err := flux.tick(ctx, s.desired); err != nil { // creates the baselines' objects
		return nil, fmt.Errorf("flux_style: %w", err)
	}
	if _, err := naive.tick(ctx, s.desired); err != nil { // takes its fields too
		return nil, fmt.Errorf("naive: %w", err)
	}
	if err := argo.watch(ctx, configMapsResource); err != nil {
		return nil, fmt.Errorf("argo_style: %w", err)
	}
	self := []int{os.Getpid()}
	contenders := append(self, s.w.serverPIDs...)
	tickOf := map[string]func() error{
		"flux_style": func() error { _, err := flux.tick(ctx, s.desired); return err },
		"naive":      func() error { _, err := naive.tick(ctx, s.desired); return err },
		"argo_style": func() error { _, err := argo.tick(configMapsResource, s.desired); return err },
	}
	logOf := map[string]*testenv.RequestLog{"flux_style": flux.requests, "naive": naive.requests, "argo_style": argo.requests}
	idle, err := s.idleServerRate(3 * time.Second)
	if err != nil {
		return nil, err
	}
	for _, name := range baselineNames {
		for run := range runs {
			logf("Unchanged tick %d/%d of %s", run+1, runs, name)
			logOf[name].Reset()
			serverBefore, err := s.serverRequests(ctx)
			if err != nil {
				return nil, err
			}
			cpuBefore, err := cpuOf(contenders)
			if err != nil {
				return nil, err
			}
			began := time.Now()
			if err := tickOf[name](); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			cpuAfter, err := cpuOf(contenders)
			if err != nil {
				return nil, err
			}
			window := time.Since(began).Seconds()
			serverAfter, err := s.serverRequests(ctx)
			if err != nil {
				return nil, err
			}
			f.requests[name] = append(f.requests[name], perObject(float64(len(logOf[name].Take()))))
			f.serverRequests[name] = append(f.serverRequests[name], perObject(serverAfter-serverBefore))
			f.cpu[name] = append(f.cpu[name], per1000(max(0, cpuAfter-cpuBefore-idle*window)))
		}
	}
	return f, nil
}

// results turns the figures into the table's rows.
func (f *noopFigures) results(objects int) []result {
	baselines := func(m map[string][]float64) map[string]Spread {
		out := map[string]Spread{}
		for _, name := range baselineNames {
			out[name] = spreadOf(m[name])
		}
		return out
	}
	reqGoal, reqMet := goalAtMost(0.01)
	cpuGoal, cpuMet := goalAtMost(0.05)
	server := spreadOf(f.serverRequests["plumb"])
	return []result{{
		Key: "noop_requests_per_object", Plumb: spreadOf(f.requests["plumb"]), Baselines: baselines(f.requests),
		Goal: reqGoal, Met: reqMet,
		Note: fmt.Sprintf("an unchanged timer tick of an App of %d ConfigMaps; counted by each client, and by kube-apiserver (apiserver_request_total for ConfigMaps, Apps and Secrets, watches left out): plumb %s, flux_style %s, naive %s per object",
			objects, formatSpread(server), formatSpread(spreadOf(f.serverRequests["flux_style"])), formatSpread(spreadOf(f.serverRequests["naive"]))),
	}, {
		Key: "noop_cpu_seconds_per_1000_objects", Plumb: spreadOf(f.cpu["plumb"]), Baselines: baselines(f.cpu),
		Goal: cpuGoal, Met: cpuMet,
		Note: fmt.Sprintf("CPU of the controller (for baselines: the bench's process) plus kube-apiserver plus etcd from /proc over the tick, less what etcd and kube-apiserver use idle over as long; plumb's runs in order, all three (the controller alone; garbage collections it completed meanwhile): %s",
			runsWithShare(f.cpu["plumb"], f.controllerCPU, f.collections)),
	}}
}

// runsWithShare lists each run's figure with a share of it and the
// garbage collections of the run in parentheses.
func runsWithShare(totals, shares, collections []float64) string {
	at := func(values []float64, i int) float64 {
		if i < len(values) {
			return values[i]
		}
		return math.NaN()
	}
	parts := make([]string, len(totals))
	for i, total := range totals {
		parts[i] = fmt.Sprintf("%s (%s; %s GC)", formatNumber(total), formatNumber(at(shares, i)), formatNumber(at(collections, i)))
	}
	return strings.Join(parts, ", ")
}
