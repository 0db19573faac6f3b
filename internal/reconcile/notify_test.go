package reconcile

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/internal/source"
)

// recordingNotifier keeps what it is told.
type recordingNotifier struct{ events []notify.Event }

func (n *recordingNotifier) Notify(e notify.Event) { n.events = append(n.events, e) }

func (n *recordingNotifier) kinds() string {
	var out []string
	for _, e := range n.events {
		out = append(out, string(e.Kind)+"@"+e.Commit[:1])
	}
	return strings.Join(out, " ")
}

// A revision's commit status goes pending once, then to its outcome, and
// is told again only when the outcome changes: a failing App retried with
// backoff does not flap between pending and failure.
func TestRevisionEventsAreToldOncePerChange(t *testing.T) {
	n := &recordingNotifier{}
	r := &Reconciler{Deps: Deps{Notifier: n}}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{URL: "https://user:hunter2@git.example.com/team/web.git"}}}
	a, b := "main@sha1:"+strings.Repeat("a", 40), "main@sha1:"+strings.Repeat("b", 40)
	ready := func(status metav1.ConditionStatus, reason string) {
		app.Status.Conditions = []metav1.Condition{{Type: plumbv1.ConditionReady, Status: status, Reason: reason}}
	}
	readFailedAt := func(revision string) error {
		return &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: "InvalidManifest",
			Err: &source.Error{Reason: source.ReasonInvalidManifest, Revision: revision, Err: errors.New("bad")}}
	}
	unreachable := &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: "SourceUnavailable",
		Err: &source.Error{Reason: source.ReasonSourceUnavailable, Err: errors.New("connection refused")}}

	// Revision a: pending, applied, Ready; a timer tick at a tells nothing,
	// nor does Git being unreachable for a while: a is live.
	r.notifyPending(app, a)
	app.Status.LastAppliedRevision, app.Status.LastAttemptedRevision = a, a
	ready("True", plumbv1.ReasonSucceeded)
	r.notifyOutcome(app, nil)
	r.notifyPending(app, a)
	r.notifyOutcome(app, nil)
	ready("False", plumbv1.ReasonReadFailed)
	r.notifyOutcome(app, unreachable)
	ready("True", plumbv1.ReasonSucceeded)
	r.notifyOutcome(app, nil)
	// Revision b is read while drift is left in place (driftPolicy alert):
	// it stays pending, and a stays as told.
	r.notifyPending(app, b)
	app.Status.LastAttemptedRevision = b
	r.notifyOutcome(app, nil)
	r.notifyPending(app, b)
	r.notifyOutcome(app, nil)
	// An Observe failure at b (the API server away), then a tick that
	// succeeds with drift still left: b is pending again, not failed.
	r.notifyOutcome(app, &PhaseError{Phase: PhaseObserve, Reason: plumbv1.ReasonObserveFailed, Err: errors.New("timeout")})
	r.notifyOutcome(app, nil)
	r.notifyOutcome(app, nil)
	// Then b fails to read, three ticks in a row (and once Git is
	// unreachable, which says nothing about b), then is fixed.
	for _, err := range []error{readFailedAt(b), readFailedAt(b), unreachable, readFailedAt(b)} {
		ready("False", plumbv1.ReasonReadFailed)
		r.notifyOutcome(app, err)
	}
	r.notifyPending(app, b)
	app.Status.LastAppliedRevision = b
	ready("True", plumbv1.ReasonSucceeded)
	r.notifyOutcome(app, nil)

	want := "RevisionPending@a RevisionSucceeded@a RevisionPending@b RevisionFailed@b RevisionPending@b RevisionFailed@b RevisionSucceeded@b"
	if got := n.kinds(); got != want {
		t.Errorf("told %q, want %q", got, want)
	}
	failed := n.events[5]
	if failed.Phase != "read" || !strings.Contains(failed.Message, "read phase") || !strings.Contains(failed.Message, "InvalidManifest") {
		t.Errorf("failure %+v, want it to name the read phase and its reason", failed)
	}
	for _, e := range n.events {
		if strings.Contains(e.Source, "hunter2") || e.Source != "https://git.example.com/team/web.git" {
			t.Errorf("source %q, want the URL without its credentials", e.Source)
		}
	}
}

// A revision applied while its objects still roll out stays pending; the
// health assessment then tells its outcome: succeeded once healthy, failed
// (HealthCheckFailed) when the check fails.
func TestARevisionRollingOutIsPendingUntilHealthDecides(t *testing.T) {
	n := &recordingNotifier{}
	r := &Reconciler{Deps: Deps{Notifier: n}}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{URL: "https://git.example.com/team/web.git"}}}
	a, b := "main@sha1:"+strings.Repeat("a", 40), "main@sha1:"+strings.Repeat("b", 40)
	ready := func(status metav1.ConditionStatus, reason string) {
		app.Status.Conditions = []metav1.Condition{{Type: plumbv1.ConditionReady, Status: status, Reason: reason}}
	}
	r.notifyPending(app, a)
	app.Status.LastAppliedRevision, app.Status.LastAttemptedRevision = a, a
	ready(metav1.ConditionUnknown, plumbv1.ReasonProgressing)
	r.notifyOutcome(app, nil) // the tick that applied a
	r.notifyOutcome(app, nil) // a re-assessment: still rolling out
	ready(metav1.ConditionTrue, plumbv1.ReasonSucceeded)
	r.notifyOutcome(app, nil) // healthy
	r.notifyPending(app, b)
	app.Status.LastAppliedRevision, app.Status.LastAttemptedRevision = b, b
	ready(metav1.ConditionUnknown, plumbv1.ReasonProgressing)
	r.notifyOutcome(app, nil)
	ready(metav1.ConditionFalse, plumbv1.ReasonHealthCheckFailed)
	r.notifyOutcome(app, nil) // the health timeout passed

	// A live revision whose objects' health moves later (a pod lost, not
	// back within the timeout) is not told again.
	r.notifyPending(app, a)
	app.Status.LastAppliedRevision, app.Status.LastAttemptedRevision = a, a
	ready(metav1.ConditionTrue, plumbv1.ReasonSucceeded)
	r.notifyOutcome(app, nil)
	for _, reason := range []string{plumbv1.ReasonProgressing, plumbv1.ReasonHealthCheckFailed} {
		ready(metav1.ConditionFalse, reason)
		r.notifyOutcome(app, nil)
	}

	want := "RevisionPending@a RevisionSucceeded@a RevisionPending@b RevisionFailed@b RevisionPending@a RevisionSucceeded@a"
	if got := n.kinds(); got != want {
		t.Errorf("told %q, want %q", got, want)
	}
	if last := n.events[3]; last.Reason != plumbv1.ReasonHealthCheckFailed {
		t.Errorf("the failure's reason %q, want HealthCheckFailed", last.Reason)
	}
}

// An App that is gone (deleted without this replica's finalizer running,
// its finalizer removed by hand) while its drift episode is open has that
// episode resolved: no Notification keeps an alert that fires for ever.
func TestAVanishedAppsOpenDriftIsResolved(t *testing.T) {
	n := &recordingNotifier{}
	r := &Reconciler{Deps: Deps{Notifier: n}}
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	r.memory.setDriftNotified(key, true)
	r.forgetDeleted(key)
	if len(n.events) != 1 || n.events[0].Kind != plumbv1.EventDriftResolved || n.events[0].App != key {
		t.Fatalf("told %+v, want one DriftResolved for %s", n.events, key)
	}
	r.forgetDeleted(key) // nothing open any more
	if len(n.events) != 1 {
		t.Errorf("told %d events, want the one resolve", len(n.events))
	}
}

// Only a Git revision names a commit: events of an OCI, Helm or bucket
// source carry their source and revision but no commit, so no commit
// status is posted for them (notify posts one only on a 40-hex commit).
func TestOnlyGitRevisionsNameACommit(t *testing.T) {
	r := &Reconciler{}
	digest := "sha256:" + strings.Repeat("ab", 32)
	commit := strings.Repeat("c", 40)
	for _, tc := range []struct {
		source             plumbv1.Source
		revision, location string
		commit             string
	}{
		{plumbv1.Source{Git: &plumbv1.GitSource{URL: "https://github.com/org/repo"}}, "main@sha1:" + commit, "https://github.com/org/repo", commit},
		{plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://ghcr.io/org/app"}}, "v1@" + digest, "oci://ghcr.io/org/app", ""},
		{plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web"}}, "1.2.0@" + digest, "https://charts.example.com", ""},
		{plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.example.com", Bucket: "deploy"}}, digest, "s3://s3.example.com/deploy", ""},
	} {
		app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}, Spec: plumbv1.AppSpec{Source: tc.source}}
		e := r.event(app, plumbv1.EventRevisionSucceeded, tc.revision)
		if e.Commit != tc.commit || e.Source != tc.location || e.Revision != tc.revision {
			t.Errorf("%s source: event source %q, revision %q, commit %q; want %q, %q, %q",
				tc.source.Kind(), e.Source, e.Revision, e.Commit, tc.location, tc.revision, tc.commit)
		}
	}
}

// An App whose destination changes while its drift episode is open has
// that episode resolved: the former cluster's objects are left there, no
// longer watched, and no Notification may keep an alert of them that
// fires for ever.
func TestADestinationChangeResolvesTheOpenDrift(t *testing.T) {
	n := &recordingNotifier{}
	r := &Reconciler{Deps: Deps{Notifier: n, Events: record.NewFakeRecorder(10)}}
	app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}}
	app.Status.Destination = "cluster-b"
	app.Status.Inventory = &plumbv1.Inventory{Entries: []plumbv1.InventoryEntry{{ObjectRef: plumbv1.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "team", Name: "settings"}}}}
	key := client.ObjectKeyFromObject(app)
	r.memory.setDriftNotified(key, true)
	r.recordDestination(app, &Target{Name: "cluster-c"}, zap.NewNop())
	if len(n.events) != 1 || n.events[0].Kind != plumbv1.EventDriftResolved || !strings.Contains(n.events[0].Message, "destination changed") {
		t.Fatalf("told %+v, want one DriftResolved that says the destination changed", n.events)
	}
	if r.memory.driftNotifiedOf(key) || app.Status.Inventory != nil {
		t.Errorf("after the change: drift still told %v, inventory %v; want neither", r.memory.driftNotifiedOf(key), app.Status.Inventory)
	}
}
