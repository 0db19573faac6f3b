package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// workqueueMetrics are client-go's workqueue series under plumb's prefix,
// by queue name.
type workqueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, workDuration      *prometheus.HistogramVec
}

func newWorkqueueMetrics() *workqueueMetrics {
	name := []string{"name"}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16) // 1ms … 33s
	return &workqueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_workqueue_depth",
			Help: "Keys waiting in the queue."}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_workqueue_adds_total",
			Help: "Keys added to the queue."}, name),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_workqueue_queue_duration_seconds",
			Help: "How long a key waited in the queue before a worker took it.", Buckets: buckets}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_workqueue_work_duration_seconds",
			Help: "How long a worker took with a key.", Buckets: buckets}, name),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_workqueue_unfinished_work_seconds",
			Help: "Seconds of work under way that has not finished (large values mean stuck workers)."}, name),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plumb_workqueue_longest_running_processor_seconds",
			Help: "How long the longest-running worker has been at its key."}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_workqueue_retries_total",
			Help: "Keys added again after a failure (rate-limited)."}, name),
	}
}

func (w *workqueueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.depth, w.adds, w.latency, w.workDuration, w.unfinished, w.longest, w.retries}
}

// WorkqueueProvider serves a client-go workqueue's metrics as
// plumb_workqueue_* series labelled with the queue's name (created at
// zero when the queue is).
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider { return m.workqueue }

func (w *workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return w.depth.WithLabelValues(name)
}

func (w *workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return w.adds.WithLabelValues(name)
}

func (w *workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return w.latency.WithLabelValues(name)
}

func (w *workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return w.workDuration.WithLabelValues(name)
}

func (w *workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return w.unfinished.WithLabelValues(name)
}

func (w *workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return w.longest.WithLabelValues(name)
}

func (w *workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return w.retries.WithLabelValues(name)
}
