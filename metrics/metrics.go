// Package metrics exports an Executor's work to Prometheus: a Collector
// counts the jobs that end, by status, and the time they waited and ran,
// from the Executor's events, and reads its queue and concurrency when
// scraped. Register it in a registry of one's own:
//
//	col := metrics.New()
//	ex, err := laboro.New(laboro.WithObserver(col.Observe))
//	…
//	col.Attach(ex)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The metrics, all prefixed laboro_:
//
//	jobs_finished_total{status}   counter    jobs that ended, by Status ("succeeded", "failed", …)
//	job_queue_wait_seconds        histogram  from entering the buffer to starting
//	job_run_seconds               histogram  from starting to ending (jobs that ran)
//	job_output_bytes_total        counter    bytes of standard output the jobs wrote
//	jobs_running                  gauge      jobs running now
//	jobs_queued                   gauge      jobs waiting in the buffer
//	submits_blocked               gauge      Submit calls waiting for room in the buffer
//	concurrency                   gauge      the concurrency level
//	parallelism                   gauge      min(concurrency, pool size): jobs that may run at once
//	buffer_size                   gauge      the buffer's capacity
//
// Observe does a map update and a few atomic adds per event; a scrape
// takes the Executor's lock once.
package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laboro-go/laboro"
)

// Collector gathers an Executor's metrics. Give its Observe to
// laboro.WithObserver (alone or called from one's own observer), Attach
// the Executor, and register it. Its methods are safe for concurrent use.
type Collector struct {
	finished *prometheus.CounterVec
	byStatus [laboro.StatusCancelled + 1]prometheus.Counter // finished's counters, made at New
	wait     prometheus.Histogram
	run      prometheus.Histogram
	output   prometheus.Counter

	running, queued, blocked, concurrency, parallelism, buffer *prometheus.Desc

	ex      atomic.Pointer[laboro.Executor]
	workers atomic.Pointer[func() int]
	fleet   *prometheus.Desc
}

// Buckets of the time histograms, in seconds: from a millisecond (a
// trivial job, a short wait) to a day.
var timeBuckets = []float64{.001, .005, .025, .1, .5, 1, 5, 30, 120, 600, 3600, 86400}

// New returns a Collector with no Executor attached yet: until Attach, it
// exports only what the events counted.
func New() *Collector {
	gauge := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("laboro_"+name, help, nil, nil)
	}
	c := &Collector{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "laboro_jobs_finished_total",
			Help: "Jobs that ended, by status."}, []string{"status"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "laboro_job_queue_wait_seconds",
			Help: "Time jobs waited in the buffer before they started.", Buckets: timeBuckets}),
		run: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "laboro_job_run_seconds",
			Help: "Time jobs ran, from start to end.", Buckets: timeBuckets}),
		output: prometheus.NewCounter(prometheus.CounterOpts{Name: "laboro_job_output_bytes_total",
			Help: "Bytes of standard output the jobs wrote."}),
		running:     gauge("jobs_running", "Jobs running now."),
		queued:      gauge("jobs_queued", "Jobs waiting in the buffer."),
		blocked:     gauge("submits_blocked", "Submit calls waiting for room in the buffer."),
		concurrency: gauge("concurrency", "The concurrency level."),
		parallelism: gauge("parallelism", "Jobs that may run at once: min(concurrency, pool size)."),
		buffer:      gauge("buffer_size", "The buffer's capacity."),
		fleet:       gauge("workers_connected", "Workers of the fleet heard from lately (with CountWorkers)."),
	}
	// Every status is counted from 0, so that a rate over it is right from
	// the first job.
	for st := laboro.StatusSucceeded; int(st) < len(c.byStatus); st++ {
		c.byStatus[st] = c.finished.WithLabelValues(st.String())
	}
	return c
}

// Attach makes the gauges read ex when scraped.
func (c *Collector) Attach(ex *laboro.Executor) { c.ex.Store(ex) }

// CountWorkers makes the collector export laboro_workers_connected, read
// from count when scraped: for an Executor whose jobs run on a fleet of
// workers (the jetstream package's Service.Workers, for one).
func (c *Collector) CountWorkers(count func() int) { c.workers.Store(&count) }

// Observe counts one of the Executor's events.
func (c *Collector) Observe(ev laboro.Event) {
	switch ev.Kind {
	case laboro.EventStarted:
		c.wait.Observe(ev.Waited.Seconds())
	case laboro.EventFinished:
		res := ev.Result
		if int(res.Status) < len(c.byStatus) && c.byStatus[res.Status] != nil {
			c.byStatus[res.Status].Inc()
		} else {
			c.finished.WithLabelValues(res.Status.String()).Inc()
		}
		if !res.Started.IsZero() {
			c.run.Observe(res.Duration().Seconds())
		}
		if res.Output != nil {
			c.output.Add(float64(res.Output.Size()))
		}
	}
}

// Describe sends the metrics' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.finished.Describe(ch)
	c.wait.Describe(ch)
	c.run.Describe(ch)
	c.output.Describe(ch)
	for _, d := range []*prometheus.Desc{c.running, c.queued, c.blocked, c.concurrency, c.parallelism, c.buffer, c.fleet} {
		ch <- d
	}
}

// Collect sends the metrics' values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.finished.Collect(ch)
	c.wait.Collect(ch)
	c.run.Collect(ch)
	c.output.Collect(ch)
	if count := c.workers.Load(); count != nil {
		ch <- prometheus.MustNewConstMetric(c.fleet, prometheus.GaugeValue, float64((*count)()))
	}
	ex := c.ex.Load()
	if ex == nil {
		return
	}
	st := ex.Stats()
	for d, v := range map[*prometheus.Desc]int{c.running: st.Running, c.queued: st.Queued, c.blocked: st.Blocked,
		c.concurrency: st.Concurrency, c.parallelism: st.Parallelism, c.buffer: st.BufferSize} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
}
