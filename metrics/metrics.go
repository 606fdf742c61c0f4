// Package metrics exports an Executor's work to Prometheus. A Collector
// reads the Executor's counters (laboro.Stats) when it is scraped, and
// nothing in between: the Executor keeps them as its jobs move, so
// exporting them costs the jobs nothing. Register it in a registry of
// one's own:
//
//	ex, err := laboro.New()
//	…
//	col := metrics.New()
//	col.Attach(ex)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The metrics, all prefixed laboro_:
//
//	jobs_started_total            counter    jobs taken from the buffer to run
//	jobs_finished_total{status}   counter    jobs that ended, by Status ("succeeded", "failed", …)
//	job_queue_wait_seconds        histogram  from entering the buffer to starting (jobs that ran, counted at their end)
//	job_run_seconds               histogram  from starting to ending (jobs that ran)
//	job_output_bytes_total        counter    bytes of standard output the jobs wrote
//	jobs_running                  gauge      jobs running now
//	jobs_queued                   gauge      jobs waiting in the buffer
//	submits_blocked               gauge      Submit calls waiting for room in the buffer
//	concurrency                   gauge      the concurrency level
//	parallelism                   gauge      min(concurrency, pool size): jobs that may run at once
//	buffer_size                   gauge      the buffer's capacity
//	workers_connected             gauge      workers of a fleet heard from lately (with CountWorkers)
//
// The histograms' buckets are laboro.HistogramBounds, from a millisecond
// to a day. A scrape takes the Executor's lock once.
package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laboro-go/laboro"
)

// Collector exports an Executor's metrics. Attach the Executor and
// register the Collector. Its methods are safe for concurrent use.
type Collector struct {
	started, finished, wait, run, output                       *prometheus.Desc
	running, queued, blocked, concurrency, parallelism, buffer *prometheus.Desc
	fleet                                                      *prometheus.Desc

	ex      atomic.Pointer[laboro.Executor]
	workers atomic.Pointer[func() int]
}

// bounds are laboro.HistogramBounds in seconds.
var bounds = func() []float64 {
	var b []float64
	for _, d := range laboro.HistogramBounds() {
		b = append(b, d.Seconds())
	}
	return b
}()

// New returns a Collector with no Executor attached yet: until Attach, it
// exports nothing but the workers of CountWorkers.
func New() *Collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("laboro_"+name, help, labels, nil)
	}
	return &Collector{
		started:     desc("jobs_started_total", "Jobs taken from the buffer to run."),
		finished:    desc("jobs_finished_total", "Jobs that ended, by status.", "status"),
		wait:        desc("job_queue_wait_seconds", "Time jobs waited in the buffer before they started."),
		run:         desc("job_run_seconds", "Time jobs ran, from start to end."),
		output:      desc("job_output_bytes_total", "Bytes of standard output the jobs wrote."),
		running:     desc("jobs_running", "Jobs running now."),
		queued:      desc("jobs_queued", "Jobs waiting in the buffer."),
		blocked:     desc("submits_blocked", "Submit calls waiting for room in the buffer."),
		concurrency: desc("concurrency", "The concurrency level."),
		parallelism: desc("parallelism", "Jobs that may run at once: min(concurrency, pool size)."),
		buffer:      desc("buffer_size", "The buffer's capacity."),
		fleet:       desc("workers_connected", "Workers of the fleet heard from lately (with CountWorkers)."),
	}
}

// Attach makes the Collector export ex's metrics.
func (c *Collector) Attach(ex *laboro.Executor) { c.ex.Store(ex) }

// CountWorkers makes the collector export laboro_workers_connected, read
// from count when scraped: for an Executor whose jobs run on a fleet of
// workers (the jetstream package's Service.Workers, for one).
func (c *Collector) CountWorkers(count func() int) { c.workers.Store(&count) }

// Describe sends the metrics' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.started, c.finished, c.wait, c.run, c.output, c.running, c.queued, c.blocked,
		c.concurrency, c.parallelism, c.buffer, c.fleet} {
		ch <- d
	}
}

// Collect sends the metrics' values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if count := c.workers.Load(); count != nil {
		ch <- prometheus.MustNewConstMetric(c.fleet, prometheus.GaugeValue, float64((*count)()))
	}
	ex := c.ex.Load()
	if ex == nil {
		return
	}
	st := ex.Stats()
	// Every status is exported from 0, so that a rate over it is right
	// from the first job.
	for s := laboro.StatusSucceeded; int(s) < len(st.Ended); s++ {
		ch <- prometheus.MustNewConstMetric(c.finished, prometheus.CounterValue, float64(st.Ended[s]), s.String())
	}
	ch <- prometheus.MustNewConstMetric(c.started, prometheus.CounterValue, float64(st.Started))
	ch <- histogram(c.wait, &st.Waits)
	ch <- histogram(c.run, &st.Runs)
	ch <- prometheus.MustNewConstMetric(c.output, prometheus.CounterValue, float64(st.OutputBytes))
	for _, g := range []struct {
		d *prometheus.Desc
		v int
	}{{c.running, st.Running}, {c.queued, st.Queued}, {c.blocked, st.Blocked}, {c.concurrency, st.Concurrency},
		{c.parallelism, st.Parallelism}, {c.buffer, st.BufferSize}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.v))
	}
}

// histogram makes h a Prometheus histogram: its buckets summed from the
// first, in seconds.
func histogram(d *prometheus.Desc, h *laboro.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(bounds))
	var sum uint64
	for i, b := range bounds {
		sum += uint64(h.Buckets[i])
		buckets[b] = sum
	}
	return prometheus.MustNewConstHistogram(d, uint64(h.Count), h.Sum.Seconds(), buckets)
}
