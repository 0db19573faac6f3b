// Package syncrequest asks for an App's next tick, with a fresh read of
// Git, in a way every replica of the controller sees: it writes the App's
// sync annotation (plumb.dev/sync-requested-at), which the leader's App
// informer turns into a tick. Any replica may receive a push webhook; only
// the leader ticks. Requests for one App that arrive while its annotation is
// being written collapse into one more write.
package syncrequest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Annotate writes the sync annotation of the App key with the time now, and
// who asked (plumbv1.SyncRequestedByWebhook or SyncRequestedByManual): one
// merge patch, no read.
func Annotate(ctx context.Context, c client.Client, key types.NamespacedName, now time.Time, by string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		plumbv1.AnnotationSyncRequestedAt: RequestValue(now),
		plumbv1.AnnotationSyncRequestedBy: by,
	}}})
	if err != nil {
		return err
	}
	app := &plumbv1.App{}
	app.Namespace, app.Name = key.Namespace, key.Name
	if err := c.Patch(ctx, app, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("asking App %s for a sync: %w", key, err)
	}
	return nil
}

// RequestValue is the sync annotation's value that Annotate writes for a
// request made at now: the App's status.lastHandledSyncRequest says so
// once a tick has answered it.
func RequestValue(now time.Time) string { return now.UTC().Format(time.RFC3339Nano) }

// Answers reports whether status.lastHandledSyncRequest (handled)
// answers request, given the App's sync annotation as read after request
// was written (requested): handled is request itself, or the request that
// replaced it in the annotation (a webhook's, another person's), which the
// API server took after ours whatever the clocks that stamped the two
// said. Values are never compared as times: the CLI's, the dashboard's
// and each replica's clocks differ. When requests follow one another
// faster than ticks, the answer waits for the tick of the newest.
func Answers(handled, request, requested string) bool {
	if handled == request {
		return true
	}
	return requested != "" && requested != request && handled == requested
}

// Requested is the App's sync annotation: the last sync request written.
func Requested(app *plumbv1.App) string { return app.Annotations[plumbv1.AnnotationSyncRequestedAt] }

// Await waits until a tick of the App key has answered the sync request
// (RequestValue of Annotate's time, once written; see Answers) and, when
// that tick left objects rolling out (Ready Unknown, reason Progressing),
// until their health is judged or the App is suspended; it returns the App
// as it then is, or ctx's error with the App as last read (nil when it
// could not be read). It reads the App from the API server (c must not be
// a cache) every poll.
func Await(ctx context.Context, c client.Reader, key types.NamespacedName, request string, poll time.Duration) (*plumbv1.App, error) {
	var last *plumbv1.App
	err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		app := &plumbv1.App{}
		if err := c.Get(ctx, key, app); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				return false, err
			}
			return false, nil // the API server may be restarting: read again
		}
		last = app
		if !Answers(app.Status.LastHandledSyncRequest, request, Requested(app)) {
			return false, nil
		}
		ready := meta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		return ready == nil || ready.Reason != plumbv1.ReasonProgressing || app.Spec.Suspend, nil
	})
	return last, err
}

// maxRetries bounds the retries of one request (the fallback timer still
// ticks the App).
const maxRetries = 5

// Requester writes the sync annotations that webhook pushes ask for, in the
// background, a few at a time.
type Requester struct {
	client  client.Client
	log     *zap.Logger
	workers int
	now     func() time.Time
	queue   workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

// New makes a Requester that writes with c, workers at a time.
func New(c client.Client, workers int, log *zap.Logger) *Requester {
	if workers < 1 {
		workers = 1
	}
	return &Requester{
		client: c, log: log, workers: workers, now: time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "sync-requests"}),
	}
}

// Request asks for a sync of the App key. It does not block.
func (r *Requester) Request(key types.NamespacedName) { r.queue.Add(key) }

// NeedLeaderElection is false: every replica writes the requests it gets.
func (r *Requester) NeedLeaderElection() bool { return false }

// Start writes requests until ctx ends.
func (r *Requester) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() {
			for r.writeNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

func (r *Requester) writeNext(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	err := Annotate(ctx, r.client, key, r.now(), plumbv1.SyncRequestedByWebhook)
	switch {
	case err == nil:
		r.queue.Forget(key)
	case r.queue.NumRequeues(key) < maxRetries && ctx.Err() == nil:
		r.log.Warn("Retrying a sync request", zap.Stringer("app", key), zap.Error(err))
		r.queue.AddRateLimited(key)
	default:
		r.log.Error("Gave up a sync request; the App's timer will tick it", zap.Stringer("app", key), zap.Error(err))
		r.queue.Forget(key)
	}
	return true
}
