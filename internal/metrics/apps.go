package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// AppLister lists the Apps whose series an AppCollector serves (those this
// controller ticks: its App cache).
type AppLister func(ctx context.Context) ([]plumbv1.App, error)

// LastSuccess is when this replica last saw a tick of the App succeed
// (false when it has not): fresher than the App's status, which a tick
// that changed nothing but times writes only now and then.
type LastSuccess func(key types.NamespacedName) (time.Time, bool)

// appListTimeout bounds the listing of one scrape.
const appListTimeout = 5 * time.Second

// AppCollector serves per-App series, read from each App's spec and status
// at scrape time: an App's series exist while the App does and go with it,
// with nothing to forget, and every replica serves the same values (they
// are the App's own). Labels are the App's namespace and name, and for
// consecutive failures the phase: never a label per object.
type AppCollector struct {
	list        AppLister
	lastSuccess LastSuccess

	lastSuccessDesc, interval, failures, drifted, ready, suspended, sourceInfo, sourceVerified, destinationInfo *prometheus.Desc
}

// NewAppCollector serves the series of the Apps list returns; lastSuccess
// (nil: none) is consulted for the last success time, the later of it and
// the status's being served. Only the replica that ticks knows the fresher
// time, and rules take the max over replicas.
func NewAppCollector(list AppLister, lastSuccess LastSuccess) *AppCollector {
	app := []string{"namespace", "name"}
	return &AppCollector{
		list: list, lastSuccess: lastSuccess,
		lastSuccessDesc: prometheus.NewDesc("plumb_app_last_success_timestamp_seconds",
			"When the App's last successful tick ended (Unix time); its creation time while it has had none.", app, nil),
		interval: prometheus.NewDesc("plumb_app_interval_seconds",
			"The App's fallback interval: a successful tick is due at least this often.", app, nil),
		failures: prometheus.NewDesc("plumb_app_consecutive_failures",
			"Failures in a row of each phase of the App's ticks since it last succeeded.", append(app, "phase"), nil),
		drifted: prometheus.NewDesc("plumb_app_drifted_objects",
			"Objects of the App left drifted after its last tick, labelled with the App's drift policy (heal or alert).", append(app, "drift_policy"), nil),
		ready: prometheus.NewDesc("plumb_app_ready",
			"1 when the App's Ready condition is True, else 0.", app, nil),
		suspended: prometheus.NewDesc("plumb_app_suspended",
			"1 when the App is suspended, else 0.", app, nil),
		sourceInfo: prometheus.NewDesc("plumb_app_source_info",
			"1 for each App, labelled with its kind of source (git, oci, helm or bucket), to join other series on.", append(app, "kind"), nil),
		destinationInfo: prometheus.NewDesc("plumb_app_destination_info",
			"1 for each App that deploys into another cluster than plumb's, labelled with its destination (the kubeconfig Secret's name), to join other series on.", append(app, "destination"), nil),
		sourceVerified: prometheus.NewDesc("plumb_app_source_verified",
			"1 when the App's source asks for signature verification and its last read revision verified, 0 when it did not; absent without verification.", app, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *AppCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lastSuccessDesc, c.interval, c.failures, c.drifted, c.ready, c.suspended, c.sourceInfo, c.sourceVerified, c.destinationInfo} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A listing that fails (the App
// cache not synced yet) serves no per-App series for that scrape, and the
// rest of the scrape goes on: their absence is itself alertable.
func (c *AppCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), appListTimeout)
	defer cancel()
	apps, err := c.list(ctx)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for i := range apps {
		app := &apps[i]
		ns, name := app.Namespace, app.Name
		last := app.CreationTimestamp.Time
		if t := app.Status.LastSuccessfulTickTime; t != nil {
			last = t.Time
		}
		if c.lastSuccess != nil {
			if t, ok := c.lastSuccess(types.NamespacedName{Namespace: ns, Name: name}); ok && t.After(last) {
				last = t
			}
		}
		gauge(c.lastSuccessDesc, float64(last.UnixNano())/1e9, ns, name)
		gauge(c.interval, app.Spec.IntervalOrDefault().Seconds(), ns, name)
		phases := app.Status.Phases
		for _, p := range []struct {
			name   string
			status plumbv1.PhaseStatus
		}{{"read", phases.Read}, {"observe", phases.Observe}, {"diff", phases.Diff}, {"apply", phases.Apply}} {
			gauge(c.failures, float64(p.status.ConsecutiveFailures), ns, name, p.name)
		}
		drifted := 0.0
		if app.Status.Drift != nil {
			drifted = float64(app.Status.Drift.Count)
		}
		gauge(c.drifted, drifted, ns, name, string(app.Spec.DriftPolicyOrDefault()))
		gauge(c.ready, flag(apimeta.IsStatusConditionTrue(app.Status.Conditions, plumbv1.ConditionReady)), ns, name)
		gauge(c.suspended, flag(app.Spec.Suspend), ns, name)
		gauge(c.sourceInfo, 1, ns, name, string(app.Spec.Source.Kind()))
		if secret := app.Spec.Destination.SecretName(); secret != "" {
			gauge(c.destinationInfo, 1, ns, name, secret)
		}
		if app.Spec.Source.Verification() != nil {
			if cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionSourceVerified); cond != nil {
				gauge(c.sourceVerified, flag(cond.Status == metav1.ConditionTrue), ns, name)
			}
		}
	}
}
