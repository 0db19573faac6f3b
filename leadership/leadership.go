// Package leadership runs the work that only one replica may do — the
// ticks — while this replica holds a Lease, and keeps the process alive
// when it loses the Lease: an API server that is unreachable for longer
// than the renew deadline ends the term, not the controller. It then
// campaigns again and starts a new term when it leads again. A stop ends
// the term first (letting it drain), and only then releases the Lease, so
// that no other replica starts before this one has finished.
package leadership

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Term is the work of one leadership term. lost is closed when the Lease
// is lost (stop at once: another replica may lead already); stop is closed
// when the process stops (finish what is under way). Term returns when
// its work has ended.
type Term func(lost, stop <-chan struct{})

// Config configures Run.
type Config struct {
	// Client reads and writes the Lease.
	Client kubernetes.Interface
	// Namespace and Name name the Lease.
	Namespace, Name string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Run campaigns for the Lease and runs term while it leads, again and again,
// until ctx ends.
func Run(ctx context.Context, cfg Config, term Term, log *zap.Logger) error {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	host, _ := os.Hostname()
	identity := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	for ctx.Err() == nil {
		// The elector's context ends only after a term has ended, so that
		// releasing the Lease never lets another replica start early.
		electorCtx, cancelElector := context.WithCancel(context.WithoutCancel(ctx))
		termDone := make(chan struct{})
		var started atomic.Bool
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: cfg.Name, ReleaseOnCancel: true,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					started.Store(true)
					defer close(termDone)
					log.Info("Leading", zap.String("lease", cfg.Namespace+"/"+cfg.Name), zap.String("identity", identity))
					term(leading.Done(), ctx.Done())
				},
				OnStoppedLeading: func() {
					if ctx.Err() == nil {
						log.Warn("Lost the lease; campaigning again", zap.String("lease", cfg.Namespace+"/"+cfg.Name))
					}
				},
			},
		})
		if err != nil {
			cancelElector()
			return fmt.Errorf("preparing leader election: %w", err)
		}
		campaignDone := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				if started.Load() {
					<-termDone // drain, then release
				}
				cancelElector()
			case <-campaignDone:
			}
		}()
		elector.Run(electorCtx) // returns when the Lease is lost, or after the stop
		if started.Load() {
			<-termDone
		}
		close(campaignDone)
		cancelElector()
	}
	return nil
}
