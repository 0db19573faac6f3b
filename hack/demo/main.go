// Command demo is what `make demo` runs: it starts a full local control
// plane, a local Git server seeded with examples/shop, and plumb's controller,
// creates an App, and narrates with timestamps what plumb does: apply R1,
// follow a new commit to R2, heal a change made by hand, prune a file removed
// from Git. Then it keeps everything running and prints how to look, until
// Ctrl-C. With DEMO_EXIT=1 it stops after the narrative, with status 0 only
// if every step converged.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/examples"
	"github.com/plumb-dev/plumb/internal/controller"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/webhook"
)

func main() {
	log.SetOutput(io.Discard) // the test Git server logs every request through the standard logger
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Getenv("DEMO_EXIT") == "1"); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// narrator prints timestamped steps, relative to the demo's start.
type narrator struct {
	w     io.Writer
	start time.Time
}

func (n narrator) say(format string, args ...any) {
	fmt.Fprintf(n.w, "[%6.1fs] %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, w io.Writer, exitWhenDone bool) (err error) {
	n := narrator{w: w, start: time.Now()}
	workDir, err := os.MkdirTemp("", "plumb-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workDir)

	n.say("Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
	cluster, err := testenv.Start(ctx, testenv.Options{Mode: testenv.ModeFull})
	if err != nil {
		return err
	}
	defer func() {
		n.say("Stopping the local control plane")
		if stopErr := cluster.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
		if err == nil {
			n.say("Stopped")
		}
	}()
	n.say("Control plane is up at %s (one fake Node run by kwok)", cluster.Config.Host)
	if err := crd.Install(ctx, cluster.Config); err != nil {
		return err
	}
	n.say("Installed the CRDs (apps.plumb.dev, notifications.plumb.dev)")

	gitServer, err := gittest.Start()
	if err != nil {
		return err
	}
	defer gitServer.Stop()
	repo, first, err := seedRepository(gitServer)
	if err != nil {
		return err
	}
	n.say("Pushed examples/shop to a local Git server: R1 = main@sha1:%s", first)

	addrs, err := testenv.FreeAddrs(3)
	if err != nil {
		return err
	}
	metricsAddr, healthAddr, webhookAddr := addrs[0], addrs[1], addrs[2]
	webhookSecret, err := randomSecret()
	if err != nil {
		return err
	}
	logPath := filepath.Join(workDir, "controller.log")
	stopController, controllerDone, err := startController(cluster, controller.Options{
		MetricsAddr: metricsAddr, HealthAddr: healthAddr, Workers: 4,
		GitCacheDir: filepath.Join(workDir, "git"), ReadLimits: source.DefaultLimits(), ShutdownTimeout: 10 * time.Second,
		WebhookAddr: webhookAddr, WebhookSecrets: map[webhook.Provider]string{webhook.GitHub: webhookSecret},
		// The demo's notification receiver listens on loopback, which the
		// default blocks.
		NotificationBlockedPrefixes: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")},
	}, logPath)
	if err != nil {
		return err
	}
	defer func() {
		stopController()
		if controllerErr := <-controllerDone; controllerErr != nil && err == nil {
			err = fmt.Errorf("controller: %w", controllerErr)
		}
	}()
	n.say("Started plumb's controller (logs: %s)", logPath)

	receiverKey, err := randomSecret()
	if err != nil {
		return err
	}
	hooks, err := startReceiver(receiverKey)
	if err != nil {
		return err
	}
	defer hooks.stop()
	s, err := newStory(cluster, gitServer, repo, n)
	if err != nil {
		return err
	}
	s.webhookAddr, s.webhookSecret, s.receiver, s.receiverKey = webhookAddr, webhookSecret, hooks, receiverKey
	s.plumbBin = filepath.Join(workDir, "bin", "plumb")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", s.plumbBin, "github.com/plumb-dev/plumb/cmd/plumb").CombinedOutput(); err != nil {
		return fmt.Errorf("building plumb's CLI: %w\n%s", err, out)
	}
	if err := s.tell(ctx, first); err != nil {
		return err
	}
	dashboard, stopDashboard, err := startDashboard(s.plumbBin, cluster.KubeconfigPath)
	if err != nil {
		return err
	}
	defer stopDashboard()
	n.say("Serving the dashboard at %s (plumb ui, with the demo's kubeconfig)", dashboard)

	fmt.Fprintf(w, `
Everything keeps running. Open the dashboard at %s in a browser, or look from another shell:

  export KUBECONFIG=%s
  export PATH=%s:%s:$PATH
  plumb get apps -A
  plumb diff shop -n default
  kubectl get deploy,svc,cm -n shop
  curl -s http://%s/metrics | head

`, dashboard, cluster.KubeconfigPath, filepath.Dir(s.plumbBin), cluster.Binaries.Dir, metricsAddr)
	n.say("Ready")
	if exitWhenDone {
		return nil
	}
	n.say("Press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}

// startDashboard runs plumb ui with kubeconfig on a free loopback port and
// returns the URL it serves, once it serves it.
func startDashboard(plumbBin, kubeconfig string) (string, func(), error) {
	addrs, err := testenv.FreeAddrs(1)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(plumbBin, "ui", "--addr", addrs[0], "--kubeconfig", kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting plumb ui: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
	url := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if _, rest, ok := strings.Cut(scanner.Text(), "Serving the dashboard at "); ok {
				url <- strings.Fields(rest)[0]
			}
		}
		close(url)
	}()
	select {
	case u, ok := <-url:
		if !ok {
			stop()
			return "", nil, fmt.Errorf("plumb ui stopped before serving: %s", stderr.String())
		}
		return u, stop, nil
	case <-time.After(time.Minute):
		stop()
		return "", nil, fmt.Errorf("plumb ui did not serve within a minute: %s", stderr.String())
	}
}

// seedRepository pushes examples/shop under deploy/ as the first commit.
func seedRepository(s *gittest.Server) (*gittest.Workdir, string, error) {
	repo, err := s.NewWorkdir("shop.git")
	if err != nil {
		return nil, "", err
	}
	files := map[string]string{}
	err = fs.WalkDir(examples.Shop, "shop", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(examples.Shop, p)
		if err != nil {
			return err
		}
		files[path.Join("deploy", path.Base(p))] = string(data)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	files["README.md"] = "The shop, deployed by plumb from deploy/.\n"
	hash, err := repo.Commit("The shop", files)
	if err == nil {
		err = repo.Push("main")
	}
	return repo, hash, err
}

// startController runs the controller in this process, logging to a file.
func startController(cluster *testenv.Cluster, opts controller.Options, logPath string) (stop func(), done <-chan error, err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	encoder := zap.NewDevelopmentEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(encoder), zapcore.AddSync(logFile), zap.DebugLevel))
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		result <- controller.Run(ctx, cluster.Config, opts, log)
		_ = log.Sync()
		logFile.Close()
	}()
	return cancel, result, nil
}

// onMain is a commit of the demo's branch as plumb shows it, abbreviated
// (main@sha1:1a2b3c4).
func onMain(hash string) string { return git.Revision{Name: "main", Hash: hash}.Short() }
