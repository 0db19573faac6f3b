package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumb-dev/plumb/ui"
)

func newUICommand(cluster *clusterFlags) *cobra.Command {
	addr := "127.0.0.1:9400"
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard on this machine, with your kubeconfig's rights",
		Long: `Serve plumb's web dashboard locally. Every page is read with your kubeconfig's identity, so
the API server's RBAC decides what you see. plumb opens no browser: it prints the URL.`,
		Example: `  plumb ui
  plumb ui --addr 127.0.0.1:9400 --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cluster.appsClient()
			if err != nil {
				return err
			}
			server, err := ui.New(ui.Options{Client: c})
			if err != nil {
				return err
			}
			listener, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listening on %s: %w (pick another with --addr)", addr, err)
			}
			ctx, stop := signal.NotifyContext(contextOf(cmd), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: server.Handler(), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(shutdown)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "Serving the dashboard at http://%s/ (Ctrl-C stops)\n", listener.Addr())
			if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", addr, "address to serve the dashboard on (keep it on loopback: it acts with your rights)")
	return cmd
}
