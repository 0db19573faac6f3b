package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestTheAppCollectorServesEachAppsSeriesFromItsStatus(t *testing.T) {
	created := metav1.NewTime(time.Unix(1000, 0))
	succeeded := metav1.NewTime(time.Unix(2000, 500_000_000))
	apps := []plumbv1.App{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", CreationTimestamp: created},
			Spec: plumbv1.AppSpec{Interval: &metav1.Duration{Duration: time.Minute}, DriftPolicy: plumbv1.DriftPolicyAlert,
				Source: plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web",
					Verify: &plumbv1.OCIVerification{Provider: plumbv1.VerifyProviderHelm}}}},
			Status: plumbv1.AppStatus{
				LastSuccessfulTickTime: &succeeded,
				Conditions: []metav1.Condition{{Type: plumbv1.ConditionReady, Status: metav1.ConditionTrue},
					{Type: plumbv1.ConditionSourceVerified, Status: metav1.ConditionTrue}},
				Drift: &plumbv1.DriftSummary{Count: 2},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "new", CreationTimestamp: created},
			Spec: plumbv1.AppSpec{Suspend: true,
				Destination: &plumbv1.Destination{KubeConfig: plumbv1.KubeConfigReference{SecretRef: plumbv1.SecretKeyReference{Name: "cluster-b"}}}},
			Status: plumbv1.AppStatus{
				Phases:     plumbv1.PhasesStatus{Read: plumbv1.PhaseStatus{ConsecutiveFailures: 3}},
				Conditions: []metav1.Condition{{Type: plumbv1.ConditionReady, Status: metav1.ConditionFalse}},
			},
		},
	}
	c := NewAppCollector(func(context.Context) ([]plumbv1.App, error) { return apps, nil }, nil)
	want := `
# HELP plumb_app_consecutive_failures Failures in a row of each phase of the App's ticks since it last succeeded.
# TYPE plumb_app_consecutive_failures gauge
plumb_app_consecutive_failures{name="new",namespace="team-b",phase="apply"} 0
plumb_app_consecutive_failures{name="new",namespace="team-b",phase="diff"} 0
plumb_app_consecutive_failures{name="new",namespace="team-b",phase="observe"} 0
plumb_app_consecutive_failures{name="new",namespace="team-b",phase="read"} 3
plumb_app_consecutive_failures{name="web",namespace="team-a",phase="apply"} 0
plumb_app_consecutive_failures{name="web",namespace="team-a",phase="diff"} 0
plumb_app_consecutive_failures{name="web",namespace="team-a",phase="observe"} 0
plumb_app_consecutive_failures{name="web",namespace="team-a",phase="read"} 0
# HELP plumb_app_destination_info 1 for each App that deploys into another cluster than plumb's, labelled with its destination (the kubeconfig Secret's name), to join other series on.
# TYPE plumb_app_destination_info gauge
plumb_app_destination_info{destination="cluster-b",name="new",namespace="team-b"} 1
# HELP plumb_app_drifted_objects Objects of the App left drifted after its last tick, labelled with the App's drift policy (heal or alert).
# TYPE plumb_app_drifted_objects gauge
plumb_app_drifted_objects{drift_policy="alert",name="web",namespace="team-a"} 2
plumb_app_drifted_objects{drift_policy="heal",name="new",namespace="team-b"} 0
# HELP plumb_app_interval_seconds The App's fallback interval: a successful tick is due at least this often.
# TYPE plumb_app_interval_seconds gauge
plumb_app_interval_seconds{name="new",namespace="team-b"} 180
plumb_app_interval_seconds{name="web",namespace="team-a"} 60
# HELP plumb_app_last_success_timestamp_seconds When the App's last successful tick ended (Unix time); its creation time while it has had none.
# TYPE plumb_app_last_success_timestamp_seconds gauge
plumb_app_last_success_timestamp_seconds{name="new",namespace="team-b"} 1000
plumb_app_last_success_timestamp_seconds{name="web",namespace="team-a"} 2000.5
# HELP plumb_app_ready 1 when the App's Ready condition is True, else 0.
# TYPE plumb_app_ready gauge
plumb_app_ready{name="new",namespace="team-b"} 0
plumb_app_ready{name="web",namespace="team-a"} 1
# HELP plumb_app_source_info 1 for each App, labelled with its kind of source (git, oci, helm or bucket), to join other series on.
# TYPE plumb_app_source_info gauge
plumb_app_source_info{kind="git",name="new",namespace="team-b"} 1
plumb_app_source_info{kind="helm",name="web",namespace="team-a"} 1
# HELP plumb_app_source_verified 1 when the App's source asks for signature verification and its last read revision verified, 0 when it did not; absent without verification.
# TYPE plumb_app_source_verified gauge
plumb_app_source_verified{name="web",namespace="team-a"} 1
# HELP plumb_app_suspended 1 when the App is suspended, else 0.
# TYPE plumb_app_suspended gauge
plumb_app_suspended{name="new",namespace="team-b"} 1
plumb_app_suspended{name="web",namespace="team-a"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	apps = apps[:1] // team-b/new was deleted
	if got := testutil.CollectAndCount(c, "plumb_app_ready"); got != 1 {
		t.Errorf("%d plumb_app_ready series after an App was deleted, want 1", got)
	}
	failing := NewAppCollector(func(context.Context) ([]plumbv1.App, error) { return nil, errors.New("cache not synced") }, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(failing, prometheus.NewGauge(prometheus.GaugeOpts{Name: "other"}))
	if families, err := reg.Gather(); err != nil || len(families) != 1 {
		t.Errorf("a failed listing gathers %d families, %v; want the others alone and no error", len(families), err)
	}
}

func TestAWorkqueueServesItsSeriesUnderPlumbsPrefix(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "apps", MetricsProvider: m.WorkqueueProvider()})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	key, _ := q.Get()
	q.AddRateLimited(key)
	q.Done(key)
	want := `
# HELP plumb_workqueue_adds_total Keys added to the queue.
# TYPE plumb_workqueue_adds_total counter
plumb_workqueue_adds_total{name="apps"} 2
# HELP plumb_workqueue_depth Keys waiting in the queue.
# TYPE plumb_workqueue_depth gauge
plumb_workqueue_depth{name="apps"} 1
# HELP plumb_workqueue_retries_total Keys added again after a failure (rate-limited).
# TYPE plumb_workqueue_retries_total counter
plumb_workqueue_retries_total{name="apps"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plumb_workqueue_adds_total", "plumb_workqueue_depth", "plumb_workqueue_retries_total"); err != nil {
		t.Error(err)
	}
}

// The last success served is the later of the status's and the ticking
// replica's own (the status is written only now and then when nothing but
// times changed).
func TestTheLastSuccessIsTheLaterOfTheStatusAndTheTicks(t *testing.T) {
	written := metav1.NewTime(time.Unix(2000, 0))
	apps := []plumbv1.App{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fresh"}, Status: plumbv1.AppStatus{LastSuccessfulTickTime: &written}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "older"}, Status: plumbv1.AppStatus{LastSuccessfulTickTime: &written}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "unknown"}, Status: plumbv1.AppStatus{LastSuccessfulTickTime: &written}},
	}
	ticks := map[string]time.Time{"fresh": time.Unix(2600, 0), "older": time.Unix(1000, 0)}
	c := NewAppCollector(func(context.Context) ([]plumbv1.App, error) { return apps, nil },
		func(key types.NamespacedName) (time.Time, bool) { at, ok := ticks[key.Name]; return at, ok })
	want := `
# HELP plumb_app_last_success_timestamp_seconds When the App's last successful tick ended (Unix time); its creation time while it has had none.
# TYPE plumb_app_last_success_timestamp_seconds gauge
plumb_app_last_success_timestamp_seconds{name="fresh",namespace="team"} 2600
plumb_app_last_success_timestamp_seconds{name="older",namespace="team"} 2000
plumb_app_last_success_timestamp_seconds{name="unknown",namespace="team"} 2000
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "plumb_app_last_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}
