package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// controllerProcess is `plumb controller` running as its own process, as
// it runs in a cluster: its CPU time and memory are its own in /proc, and
// it counts its own API requests (plumb_api_requests_total).
type controllerProcess struct {
	cmd         *exec.Cmd
	dir         string
	metricsAddr string
	webhookAddr string
	pprofAddr   string        // Go's profiles, and a way to make the process collect garbage
	exited      chan struct{} // closed when the process has exited
	exitErr     error         // set before exited closes
}

// buildPlumb builds plumb's binary into dir.
func buildPlumb(dir string) (string, error) {
	bin := filepath.Join(dir, "plumb")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/plumb-dev/plumb/cmd/plumb").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building plumb: %w\n%s", err, out)
	}
	return bin, nil
}

// startController runs the controller against kubeconfig, with its Git
// cache and log under dir, serving a GitHub webhook with secret, and
// waits until it serves metrics.
func startController(ctx context.Context, bin, kubeconfig, dir, webhookSecret string, extra ...string) (*controllerProcess, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addrs, err := testenv.FreeAddrs(4)
	if err != nil {
		return nil, err
	}
	metricsAddr, webhookAddr, healthAddr, pprofAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	secretFile := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(webhookSecret), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"controller",
		"--kubeconfig", kubeconfig,
		"--metrics-addr", metricsAddr, "--health-addr", healthAddr, "--pprof-addr", pprofAddr,
		"--webhook-addr", webhookAddr, "--webhook-secret-file", "github=" + secretFile,
		"--git-cache-dir", filepath.Join(dir, "git"),
		// Leader election renews a Lease every 2 seconds: a fixed cost per
		// replica, not a cost of ticks, so it is left out of what is measured.
		"--leader-elect=false",
		"--log-level", "info", "--log-encoding", "console",
		"--shutdown-timeout", "10s",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &controllerProcess{cmd: cmd, dir: dir, metricsAddr: metricsAddr, webhookAddr: webhookAddr, pprofAddr: pprofAddr, exited: make(chan struct{})}
	go func() { p.exitErr = cmd.Wait(); logFile.Close(); close(p.exited) }()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("the controller exited: %v\n%s", p.exitErr, p.tail(30))
		default:
		}
		_, err := p.metrics(ctx)
		return err == nil, nil
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("waiting for the controller to serve metrics: %w", err)
	}
	return p, nil
}

// pid is the controller's process id.
func (p *controllerProcess) pid() int { return p.cmd.Process.Pid }

// metrics scrapes the controller's /metrics.
func (p *controllerProcess) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return scrapeURL(ctx, "http://"+p.metricsAddr+"/metrics")
}

// counters is what the controller has counted so far.
type counters struct {
	// Ticks is every tick run (success and failure). The counter moves
	// just before the tick's status write, so a status write (a heartbeat
	// every tenth unchanged tick) may fall after the window it ends.
	Ticks float64
	// Requests is every API request; TickRequests leaves out the list,
	// watch and discovery requests that informers and the REST mapper make
	// once per kind, not per tick.
	Requests, TickRequests float64
	// Collections is how many garbage collections the process completed.
	Collections float64
}

// counters reads the controller's counters.
func (p *controllerProcess) counters(ctx context.Context) (counters, error) {
	fams, err := p.metrics(ctx)
	if err != nil {
		return counters{}, err
	}
	collections, err := gcCycles(fams)
	if err != nil {
		return counters{}, err
	}
	return counters{
		Collections: collections,
		Ticks:       sumWhere(fams, "plumb_ticks_total", nil),
		Requests:    sumWhere(fams, "plumb_api_requests_total", nil),
		TickRequests: sumWhere(fams, "plumb_api_requests_total", func(l map[string]string) bool {
			return l["verb"] != "list" && l["verb"] != "watch" && l["verb"] != "discovery"
		}),
	}, nil
}

// waitTicks waits until the controller has run more than after ticks, and
// returns its counters then.
func (p *controllerProcess) waitTicks(ctx context.Context, after float64, timeout time.Duration) (counters, error) {
	var last counters
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		c, err := p.counters(ctx)
		if err != nil {
			return false, nil
		}
		last = c
		return c.Ticks > after, nil
	})
	if err != nil {
		return last, fmt.Errorf("waiting for tick %v of the controller: %w\n%s", after+1, err, p.tail(20))
	}
	return last, nil
}

// pause freezes the process (SIGSTOP); resume thaws it. A frozen controller
// uses no CPU and makes no request, so the API server's own background work
// can be measured beside it.
func (p *controllerProcess) pause() error  { return p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *controllerProcess) resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// stop ends the controller (SIGTERM, then SIGKILL after 30 seconds).
func (p *controllerProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail is the end of the controller's log.
func (p *controllerProcess) tail(n int) string {
	data, err := os.ReadFile(filepath.Join(p.dir, "controller.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// collectGarbage makes the controller collect garbage (a heap profile with
// gc=1 on its pprof address, whose body is dropped).
func (p *controllerProcess) collectGarbage(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.pprofAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("making the controller collect garbage: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("making the controller collect garbage: %s", resp.Status)
	}
	return nil
}
