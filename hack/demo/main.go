// Command demo is what `make demo` runs: it starts a full local control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
// with one fake Node), installs plumb's App CRD, prints how to reach the
// cluster with kubectl, and keeps it running until Ctrl-C. With DEMO_EXIT=1 it
// stops as soon as the cluster is ready (for scripts and tests).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/localcluster"
)

func main() {
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

func run(ctx context.Context, w io.Writer, exitWhenReady bool) (err error) {
	n := narrator{w: w, start: time.Now()}
	n.say("Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
	cluster, err := localcluster.Start(ctx, localcluster.Options{Mode: localcluster.ModeFull})
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
	n.say("Installed the App CRD (apps.plumb.dev)")

	fmt.Fprintf(w, `
Use the cluster from another shell:

  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get nodes
  kubectl get apps -A

`, cluster.KubeconfigPath, cluster.Binaries.Dir)
	n.say("Ready")
	if exitWhenReady {
		return nil
	}
	n.say("Press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}
