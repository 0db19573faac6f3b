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
	baseLock := &resourcelock.LeaseLock{
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
		lock := &renewals{Interface: baseLock}
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			// Not client-go's release: it reads the Lease afresh but judges
			// whether this replica leads by what it saw last, so a replica
			// cut off while another took the Lease would empty theirs (and
			// campaign straight back in). Run releases it itself, on a stop.
			Lock: lock, Name: cfg.Name, ReleaseOnCancel: false,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					started.Store(true)
					defer close(termDone)
					log.Info("Leading", zap.String("lease", cfg.Namespace+"/"+cfg.Name), zap.String("identity", identity))
					lost := make(chan struct{})
					ended := make(chan struct{})
					defer close(ended)
					go lock.watch(leading, ended, lost, cfg.RenewDeadline, cfg.RetryPeriod, log)
					term(lost, ctx.Done())
					// The term is over: stop renewing (a term ended by the
					// watchdog would otherwise hold the Lease without ticking)
					// and campaign again.
					cancelElector()
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
		// A successful write of the Lease means the elector started a term
		// (perhaps not yet running): wait for it to end.
		if started.Load() || lock.acquired() {
			<-termDone
		}
		close(campaignDone)
		cancelElector()
		if ctx.Err() != nil && lock.acquired() {
			release(baseLock, identity, log)
		}
	}
	return nil
}

// release gives the Lease up on a stop, so that another replica need not
// wait for it to expire: only while this replica holds it (read afresh;
// the update is refused should anyone have written it since).
func release(lock *resourcelock.LeaseLock, identity string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	record, _, err := lock.Get(ctx)
	if err != nil || record.HolderIdentity != identity {
		return // not ours (any more), or unreadable: it expires on its own
	}
	now := metav1.NewTime(time.Now())
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
		LeaderTransitions: record.LeaderTransitions}); err != nil {
		log.Info("Could not release the lease; it expires on its own", zap.Error(err))
	}
}

// renewals is the Lease lock, remembering when this replica last wrote the
// Lease successfully (a time.Time with its monotonic reading, so that a
// step of the wall clock does not move the watchdog).
type renewals struct {
	resourcelock.Interface
	last atomic.Pointer[time.Time] // the last successful Create or Update
}

func (r *renewals) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := r.Interface.Create(ctx, rec)
	if err == nil {
		now := time.Now()
		r.last.Store(&now)
	}
	return err
}

func (r *renewals) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := r.Interface.Update(ctx, rec)
	if err == nil {
		now := time.Now()
		r.last.Store(&now)
	}
	return err
}

// acquired reports whether this replica ever wrote the Lease.
func (r *renewals) acquired() bool { return r.last.Load() != nil }

// watch closes lost when the elector ends the term (leading is done), or
// as soon as the Lease has not been renewed for renewDeadline: a renewal
// that hangs (an API server that accepts connections but does not answer)
// must not keep this replica ticking past the moment another may take the
// Lease (the lease duration after the last renewal). It returns when the
// term has ended.
func (r *renewals) watch(leading context.Context, ended <-chan struct{}, lost chan<- struct{}, renewDeadline, every time.Duration, log *zap.Logger) {
	ticker := time.NewTicker(every / 2)
	defer ticker.Stop()
	for {
		select {
		case <-ended:
			return
		case <-leading.Done():
			close(lost)
			return
		case <-ticker.C:
			if since := time.Since(*r.last.Load()); since > renewDeadline {
				log.Warn("The lease was not renewed within the renew deadline; stopping ticks", zap.Duration("since", since))
				close(lost)
				return
			}
		}
	}
}
