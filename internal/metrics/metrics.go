// Package metrics holds plumb's Prometheus collectors, registered on a
// registry the caller owns (never the global one). Every label series is
// created at zero, so a rate() or an alert works before the first event.
package metrics

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Phases and failure reasons are the label values plumb uses; both sets are
// small and fixed (no label per App or per object).
var (
	phases  = []string{"read", "observe", "diff", "apply", "health"}
	reasons = map[string][]string{
		"read":    {"ReadFailed"},
		"observe": {"ObserveFailed"},
		"diff":    {"DiffFailed"},
		"apply":   {"ApplyFailed", "PruneFailed"},
		"health":  {"HealthCheckFailed"},
	}
	actions = []string{"created", "configured", "deleted"}
)

// Metrics are the loop's collectors.
type Metrics struct {
	ticks         *prometheus.CounterVec
	phaseFailures *prometheus.CounterVec
	tickDuration  prometheus.Histogram
	phaseDuration *prometheus.HistogramVec
	changes       *prometheus.CounterVec
	webhooks      *prometheus.CounterVec
	matched       prometheus.Histogram
	apiRequests   *prometheus.CounterVec
	syncs         *prometheus.CounterVec
	commitApplied prometheus.Histogram
	notifications *prometheus.CounterVec
	notifyRetries *prometheus.CounterVec
	hooks         *prometheus.CounterVec
	hookDuration  *prometheus.HistogramVec
	// Shards (--shards=auto): the live members this replica sees, the
	// slots it holds and their Apps, and the slots it took and released.
	shardMembers, shardSlots, shardApps prometheus.Gauge
	slotMoves                           *prometheus.CounterVec
	workqueue                           *workqueueMetrics
}

// hookPhases and hookResults are the label values of the hook series.
var (
	hookPhases  = []string{"PreSync", "Sync", "PostSync", "SyncFail", "PreDelete", "PostDelete"}
	hookResults = []string{"Succeeded", "Failed"}
)

// Triggers are the values of plumb_syncs_total's trigger label (the
// reconcile package's triggers).
var triggers = []string{"timer", "webhook", "drift", "manual", "spec", "dependency"}

// sinks are the values of the notification series' sink label: the
// Notification types, and the controller's own intake.
var sinks = []string{"webhook", "slack", "alertmanager", "github", "gitlab", "gitea", "intake"}

// webhookEvents bounds the event label: payload headers are attacker input.
var webhookEvents = map[string]string{
	"push": "push", "Push Hook": "push", "Tag Push Hook": "tag", "repo:refs_changed": "push",
	"ping": "ping", "diagnostics:ping": "ping",
	"PUSH_ARTIFACT": "push", "package": "push", "registry_package": "push", // registries
}

// webhookCodes are the status codes the receiver answers with; ServeWebhooks
// creates their series at zero.
var webhookCodes = []string{"200", "202", "400", "401", "405", "413"}

// ServeWebhooks creates the webhook series of each provider the receiver
// serves at zero (every event label and status code), so that a rate of
// rejections works from the first one.
func (m *Metrics) ServeWebhooks(providers []string) {
	for _, provider := range providers {
		for _, event := range []string{"push", "tag", "ping", "other"} {
			for _, code := range webhookCodes {
				m.webhooks.WithLabelValues(provider, event, code)
			}
		}
	}
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_ticks_total",
			Help: "Ticks run, by result (success or failure).",
		}, []string{"result"}),
		phaseFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_phase_failures_total",
			Help: "Failed ticks by the phase that failed and its condition reason; phase health counts the ticks whose objects failed their health check, and the re-assessments between ticks that found it first.",
		}, []string{"phase", "reason"}),
		tickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "plumb_tick_duration_seconds",
			Help:    "Duration of whole ticks.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms … 33s
		}),
		phaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plumb_phase_duration_seconds",
			Help:    "Duration of each phase of successful ticks.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms … 16s
		}, []string{"phase"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_object_changes_total",
			Help: "Objects created, configured or deleted by the Apply phase.",
		}, []string{"action"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_webhook_requests_total",
			Help: "Webhook requests by provider, event (push, tag, ping or other) and HTTP status code.",
		}, []string{"provider", "event", "code"}),
		matched: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "plumb_webhook_matched_apps",
			Help:    "Apps matched per verified push.",
			Buckets: []float64{0, 1, 2, 5, 10, 25, 100},
		}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_api_requests_total",
			Help: "Requests the controller made to the Kubernetes API server, by verb and whether they were dry runs.",
		}, []string{"verb", "dry_run"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_syncs_total",
			Help: "Ticks of Apps that are not suspended, by what asked for them: timer, webhook, drift (an object of the App changed), manual (the sync annotation), spec (a new or changed App) or dependency (an App it depends on changed its readiness); health re-assessments between ticks are not counted.",
		}, []string{"trigger"}),
		commitApplied: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "plumb_commit_to_applied_seconds",
			Help: "From a commit's time in Git (its committer date) to the end of the tick that made it live, for each revision an App applied after an earlier one.",
			// 1s … ~4.5h: a webhook-driven delivery takes seconds, a timer-driven one up to an interval.
			Buckets: prometheus.ExponentialBuckets(1, 2, 15),
		}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_notifications_total",
			Help: "Notification events by sink type and result: delivered, failed (given up after retries, or refused) or dropped (a queue was full; sink \"intake\" when the controller's own intake was).",
		}, []string{"sink", "result"}),
		notifyRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_notification_attempt_failures_total",
			Help: "Failed attempts to deliver a notification, by sink type (each is retried with backoff until it is given up).",
		}, []string{"sink"}),
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_hooks_total",
			Help: "Hooks of ordered syncs that ended, by sync phase and result (Succeeded or Failed).",
		}, []string{"phase", "result"}),
		hookDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plumb_hook_duration_seconds",
			Help:    "How long hooks of ordered syncs ran, from their creation to their end, by sync phase.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800},
		}, []string{"phase"}),
		shardMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plumb_shard_members",
			Help: "With --shards=auto: the live controller replicas this one sees in its shard group, itself included.",
		}),
		shardSlots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plumb_shard_slots",
			Help: "With --shards=auto: the slots (of 256) this replica holds, whose Apps it ticks.",
		}),
		shardApps: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plumb_shard_apps",
			Help: "With --shards=auto: the Apps in the slots this replica holds.",
		}),
		slotMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plumb_shard_slot_moves_total",
			Help: "With --shards=auto: slots this replica took or released (their Apps handed over), and the times it lost every slot at once (action lost: its Lease was not renewed in time).",
		}, []string{"action"}),
		workqueue: newWorkqueueMetrics(),
	}
	for _, c := range append([]prometheus.Collector{m.ticks, m.phaseFailures, m.tickDuration, m.phaseDuration, m.changes, m.webhooks, m.matched, m.apiRequests, m.syncs, m.commitApplied,
		m.notifications, m.notifyRetries, m.hooks, m.hookDuration, m.shardMembers, m.shardSlots, m.shardApps, m.slotMoves},
		m.workqueue.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, result := range []string{"success", "failure"} {
		m.ticks.WithLabelValues(result)
	}
	for _, action := range []string{"take", "release", "lost"} {
		m.slotMoves.WithLabelValues(action)
	}
	for _, phase := range phases {
		m.phaseDuration.WithLabelValues(phase)
		for _, reason := range reasons[phase] {
			m.phaseFailures.WithLabelValues(phase, reason)
		}
	}
	for _, action := range actions {
		m.changes.WithLabelValues(action)
	}
	for _, verb := range apiVerbs {
		m.apiRequests.WithLabelValues(verb, "false")
	}
	m.apiRequests.WithLabelValues("apply", "true")
	for _, trigger := range triggers {
		m.syncs.WithLabelValues(trigger)
	}
	for _, phase := range hookPhases {
		m.hookDuration.WithLabelValues(phase)
		for _, result := range hookResults {
			m.hooks.WithLabelValues(phase, result)
		}
	}
	for _, sink := range sinks {
		for _, result := range []string{"delivered", "failed", "dropped"} {
			m.notifications.WithLabelValues(sink, result)
		}
		m.notifyRetries.WithLabelValues(sink)
	}
	return m, nil
}

// ObserveTick records a tick's duration and result; failedPhase and reason
// are empty for a successful tick.
func (m *Metrics) ObserveTick(d time.Duration, failedPhase, reason string) {
	m.tickDuration.Observe(d.Seconds())
	if failedPhase == "" {
		m.ticks.WithLabelValues("success").Inc()
		return
	}
	m.ticks.WithLabelValues("failure").Inc()
	m.phaseFailures.WithLabelValues(failedPhase, reason).Inc()
}

// ObservePhaseFailure counts a failure of a phase outside a tick's count
// (a health re-assessment that found the App's objects failed).
func (m *Metrics) ObservePhaseFailure(phase, reason string) {
	m.phaseFailures.WithLabelValues(phase, reason).Inc()
}

// ObserveSync counts a tick by its trigger. An unknown trigger is counted
// as "timer" (the label set stays fixed).
func (m *Metrics) ObserveSync(trigger string) {
	for _, t := range triggers {
		if t == trigger {
			m.syncs.WithLabelValues(trigger).Inc()
			return
		}
	}
	m.syncs.WithLabelValues("timer").Inc()
}

// ObserveCommitToApplied records how long after its commit a revision
// became live. A commit dated in the future (a skewed clock) counts as 0.
func (m *Metrics) ObserveCommitToApplied(d time.Duration) {
	m.commitApplied.Observe(max(d, 0).Seconds())
}

// ObserveNotification counts a notification event's result at a sink.
func (m *Metrics) ObserveNotification(sink, result string) {
	m.notifications.WithLabelValues(sink, result).Inc()
}

// ObserveNotificationAttemptFailure counts a failed delivery attempt.
func (m *Metrics) ObserveNotificationAttemptFailure(sink string) {
	m.notifyRetries.WithLabelValues(sink).Inc()
}

// ObserveHook records a hook that ended. A phase or result outside the
// fixed sets is not recorded (the label sets stay fixed).
func (m *Metrics) ObserveHook(phase, result string, d time.Duration) {
	if !slices.Contains(hookPhases, phase) || !slices.Contains(hookResults, result) {
		return
	}
	m.hooks.WithLabelValues(phase, result).Inc()
	m.hookDuration.WithLabelValues(phase).Observe(max(d, 0).Seconds())
}

// ObserveShard records what a shard member sees: the live members, and
// the slots it holds and the Apps in them.
func (m *Metrics) ObserveShard(members, slots, apps int) {
	m.shardMembers.Set(float64(members))
	m.shardSlots.Set(float64(slots))
	m.shardApps.Set(float64(apps))
}

// NewCachedObjects serves plumb_cached_objects, read at scrape time from
// count: the objects the Observe phase's informers hold. With
// --shards=auto each replica holds those of the slots it holds, so the
// series of the replicas add up to the objects plumb manages.
func NewCachedObjects(count func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "plumb_cached_objects",
		Help: "Objects the informers of the Observe phase hold (with --shards=auto: those of the slots this replica holds; informers listing to replace others during a change of slots are not counted).",
	}, func() float64 { return float64(count()) })
}

// ObserveSlotMoves counts slots taken or released (action take or
// release), or one loss of every slot (action lost, n 1).
func (m *Metrics) ObserveSlotMoves(action string, n int) {
	switch action {
	case "take", "release", "lost":
		m.slotMoves.WithLabelValues(action).Add(float64(n))
	}
}

// ObservePhase records how long a phase took.
func (m *Metrics) ObservePhase(phase string, d time.Duration) {
	m.phaseDuration.WithLabelValues(phase).Observe(d.Seconds())
}

// ObserveChange counts objects changed by one action.
func (m *Metrics) ObserveChange(action string, n int) {
	m.changes.WithLabelValues(action).Add(float64(n))
}

// ObserveWebhook counts one webhook request and, for a verified push, how
// many Apps it matched (matched < 0: the request was no push to match, such
// as a package event of no container tag).
func (m *Metrics) ObserveWebhook(provider, event string, code, matched int) {
	label, ok := webhookEvents[event]
	if !ok {
		label = "other"
	}
	m.webhooks.WithLabelValues(provider, label, strconv.Itoa(code)).Inc()
	if label == "push" || label == "tag" {
		if code == 202 && matched >= 0 {
			m.matched.Observe(float64(matched))
		}
	}
}
