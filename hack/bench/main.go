// Command bench is plumb's performance harness: it starts its own local
// control plane (etcd and kube-apiserver) and Git server, runs plumb's
// controller as its own process, and measures it scenario by scenario beside
// baselines that do what other tools do per tick (flux_style: Flux's
// ApplyAllStaged over every object; argo_style: an unfiltered cache of every
// object of every watched kind; naive: LIST, GET and dry-run per object), run
// in the same process against the same cluster and data. It prints a
// markdown table of medians with the runs' range, and with --json one JSON
// object on the last line.
//
//	go run ./bench            # full: 1,000 objects per App, 5 runs
//	go run ./bench --quick    # smaller sizes, fewer runs
//	go run ./bench --shards   # only the fleet on 1 and 3 replicas
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// sizes are what a run measures.
type sizes struct {
	// Objects is the size of the App of the per-tick scenarios.
	Objects int
	// Runs repeats each measured tick; Drifts is how many drifts are healed.
	Runs, Drifts int
	// Pushes is how many commits are announced by webhook.
	Pushes int
	// Unmanaged is how many objects no App manages are added to the cluster.
	Unmanaged int
	// ColdApps Apps of 4 objects each are synced from nothing.
	ColdApps int
	// ManagedApps Apps grow to ManagedPerApp objects each.
	ManagedApps, ManagedPerApp int
	// FleetApps Apps tick every FleetInterval.
	FleetApps     int
	FleetInterval time.Duration
}

// fleetPeriods is how many intervals of the fleet are watched.
const fleetPeriods = 3

// coldObjectsPerApp is the size of each App of the cold sync (scenario 8).
const coldObjectsPerApp = 4

var (
	fullSizes  = sizes{Objects: 1000, Runs: 5, Drifts: 20, Pushes: 20, Unmanaged: 10000, ColdApps: 250, ManagedApps: 10, ManagedPerApp: 1000, FleetApps: 1000, FleetInterval: time.Minute}
	quickSizes = sizes{Objects: 200, Runs: 3, Drifts: 10, Pushes: 10, Unmanaged: 2000, ColdApps: 50, ManagedApps: 2, ManagedPerApp: 300, FleetApps: 200, FleetInterval: 20 * time.Second}
)

func main() {
	quick := flag.Bool("quick", false, "smaller sizes and fewer runs (a few minutes)")
	asJSON := flag.Bool("json", false, "end with one JSON line: each figure's key and plumb's median")
	quiet := flag.Bool("quiet", false, "no progress lines on stderr")
	shards := flag.Bool("shards", false, "run only the shards scenario: a fleet on 1 and on 3 replicas (--shards=auto)")
	shardApps := flag.Int("shard-apps", 0, "with --shards: the fleet's Apps (0: the size's, 10,000 or 300 with --quick)")
	flag.Parse()
	if *shardApps != 0 && !*shards {
		fmt.Fprintln(os.Stderr, "bench: --shard-apps sizes the shards scenario: give --shards too")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *shards {
		size, label := fullShardSizes, "full"
		if *quick {
			size, label = quickShardSizes, "quick (smaller sizes: not the figures the README quotes)"
		}
		if *shardApps > 0 && *shardApps != size.Apps {
			size.Apps, label = *shardApps, fmt.Sprintf("%s, with %d Apps (not the figures the README quotes)", label, *shardApps)
		}
		if err := runShards(ctx, os.Stdout, size, label, logTo(!*quiet)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	size, label := fullSizes, "full"
	if *quick {
		size, label = quickSizes, "quick (smaller sizes: not the figures the README quotes)"
	}
	if err := run(ctx, os.Stdout, size, label, *asJSON, logTo(!*quiet)); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// run measures every scenario and writes the report.
func run(ctx context.Context, out io.Writer, size sizes, label string, asJSON bool, logf func(string, ...any)) error {
	log.SetOutput(io.Discard) // the Git test server logs every request through the standard logger
	began := time.Now()
	w, err := newWorld(ctx, logf)
	if err != nil {
		return err
	}
	defer w.close()
	results, err := measureSteady(ctx, w, size, logf)
	if err != nil {
		return err
	}
	fleet, err := measureFleet(ctx, w, size.FleetApps, size.FleetInterval, fleetPeriods, logf)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	results = append(results, fleet.results()...)
	// Last, since its objects stay in the cluster and carry plumb's labels.
	managed, err := measureManaged(ctx, w, size.ManagedApps, size.ManagedPerApp, logf)
	if err != nil {
		return fmt.Errorf("managed objects: %w", err)
	}
	results = insertBefore(results, "rss_bytes_per_unmanaged_object", managed.results())
	fmt.Fprintf(out, "plumb bench, %s run: %d objects per App, %d runs per figure; medians with (min–max); %s on %s\n\n",
		label, size.Objects, size.Runs, time.Since(began).Round(time.Second), hostDescription())
	writeTable(out, results)
	if asJSON {
		fmt.Fprintln(out)
		return writeJSON(out, results)
	}
	return nil
}

// runShards measures the shards scenario in a world of its own and writes
// its report.
func runShards(ctx context.Context, out io.Writer, size shardSizes, label string, logf func(string, ...any)) error {
	log.SetOutput(io.Discard)
	began := time.Now()
	w, err := newWorld(ctx, logf)
	if err != nil {
		return err
	}
	defer w.close()
	f, err := measureShards(ctx, w, size, logf)
	if err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	fmt.Fprintf(out, "plumb bench, shards scenario, %s run; %s on %s\n\n", label, time.Since(began).Round(time.Second), hostDescription())
	writeShards(out, f)
	return nil
}

// measureSteady runs scenarios 1 to 5 and 7 on one App, scenario 6 on
// another App of the same controller, and scenarios 10 and 8 beside them.
func measureSteady(ctx context.Context, w *world, size sizes, logf func(string, ...any)) ([]result, error) {
	s, err := newSteadyApp(ctx, w, size.Objects, logf)
	if err != nil {
		return nil, err
	}
	defer s.close()
	noop, err := measureNoop(ctx, s, size.Runs, logf)
	if err != nil {
		return nil, fmt.Errorf("unchanged ticks: %w", err)
	}
	drift, err := measureDrift(ctx, s, size.Drifts, logf)
	if err != nil {
		return nil, fmt.Errorf("drift: %w", err)
	}
	writes, err := measureWrites(ctx, s, size.Runs, logf)
	if err != nil {
		return nil, fmt.Errorf("changed objects: %w", err)
	}
	restart, err := measureRestart(ctx, s, size.Runs, logf)
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	webhook, err := measureWebhook(ctx, w, s.ctl, size.Pushes, logf)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	unmanaged, err := measureUnmanaged(ctx, s, size.Unmanaged, logf)
	if err != nil {
		return nil, fmt.Errorf("unmanaged objects: %w", err)
	}
	cold, err := measureColdSync(ctx, s, size.ColdApps, coldObjectsPerApp, logf)
	if err != nil {
		return nil, fmt.Errorf("cold sync: %w", err)
	}
	results := noop.results(size.Objects)
	results = append(results, drift.results(size.Drifts)...)
	results = append(results, writes.results(size.Objects)...)
	results = append(results, restartResult(restart, size.Objects))
	results = append(results, webhookResults(webhook)...)
	results = append(results, cold.results()...)
	results = append(results, unmanaged.results())
	return results, nil
}

// insertBefore puts r before the result of key (at the end if none has it),
// so that the table keeps the scenarios' order whatever order they ran in.
func insertBefore(results []result, key string, r result) []result {
	for i, existing := range results {
		if existing.Key == key {
			return append(results[:i], append([]result{r}, results[i:]...)...)
		}
	}
	return append(results, r)
}

// hostDescription names the machine's CPU count.
func hostDescription() string {
	return fmt.Sprintf("%d CPUs", numCPU())
}
