package node

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mlfsd/mlfsd/cache"
)

// Metric names, for dashboards and tests.
const (
	MetricBackendReadBytes   = "mlfsd_backend_read_bytes_total"
	MetricBackendRequests    = "mlfsd_backend_requests_total"
	MetricCacheHitBytes      = "mlfsd_cache_hit_bytes_total"
	MetricCacheBytes         = "mlfsd_cache_bytes"
	MetricMountReadBytes     = "mlfsd_mount_read_bytes_total"
	MetricUploadPendingBytes = "mlfsd_upload_pending_bytes"
	MetricUploadPendingFiles = "mlfsd_upload_pending_files"
	MetricUploadFailures     = "mlfsd_upload_failures_total"
	MetricFUSERequests       = "mlfsd_fuse_requests_total"
	MetricFUSELatency        = "mlfsd_fuse_request_duration_seconds"
	MetricMounts             = "mlfsd_mounts"
	// MetricMountsWaiting counts the mounts of the mount table that wait
	// for their client's credentials after a restart (not served).
	MetricMountsWaiting = "mlfsd_mounts_waiting_credentials"
)

// mountMetrics are the instruments of one mount, on a registry of its own
// (every series carries mount=<target>), so that unmounting drops them
// whole and mounting the same target again starts from zero.
type mountMetrics struct {
	reg          *prometheus.Registry
	labels       prometheus.Labels
	backendBytes prometheus.Counter
	backendReqs  *prometheus.CounterVec
	fuseReqs     *prometheus.CounterVec
	fuseLatency  *prometheus.HistogramVec
	fuse         map[string]fuseInstruments // by op; never written after newMountMetrics
}

func newMountMetrics(target string) *mountMetrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"mount": target}
	m := &mountMetrics{
		reg:    reg,
		labels: l,
		backendBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricBackendReadBytes, ConstLabels: l,
			Help: "Bytes read from the store."}),
		backendReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBackendRequests, ConstLabels: l,
			Help: "Requests sent to the store, by operation and result (ok, not_found, canceled, error)."}, []string{"op", "result"}),
		fuseReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFUSERequests, ConstLabels: l,
			Help: "FUSE requests answered, by operation."}, []string{"op"}),
		fuseLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricFUSELatency, ConstLabels: l,
			Help:    "Time to answer a FUSE request, by operation.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 4, 10)}, []string{"op"}),
	}
	reg.MustRegister(m.backendBytes, m.backendReqs, m.fuseReqs, m.fuseLatency)
	m.fuse = make(map[string]fuseInstruments, len(fuseOps))
	for _, op := range fuseOps {
		m.fuse[op] = fuseInstruments{m.fuseReqs.WithLabelValues(op), m.fuseLatency.WithLabelValues(op)}
	}
	return m
}

func (m *mountMetrics) request(op string, err error) {
	m.backendReqs.WithLabelValues(op, resultOf(err)).Inc()
}

// readBytes implements backendCounter.
func (m *mountMetrics) readBytes(n int) {
	if n > 0 {
		m.backendBytes.Add(float64(n))
	}
}

// fuseOps are the operations fs.Observer reports; their instruments are
// looked up once, not per request.
var fuseOps = []string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link",
	"symlink", "readlink", "create", "open", "read", "write", "release", "flush", "fsync", "opendir", "readdir",
	"readdirplus", "statfs"}

type fuseInstruments struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// observe implements fs.Observer.
func (m *mountMetrics) observe(op string, d time.Duration) {
	in, ok := m.fuse[op] // read-only after newMountMetrics
	if !ok {
		in = fuseInstruments{m.fuseReqs.WithLabelValues(op), m.fuseLatency.WithLabelValues(op)}
	}
	in.count.Inc()
	in.latency.Observe(d.Seconds())
}

// tierFigures are the node cache's figures per tier.
type tierFigures struct {
	hitBytes  map[string]int64 // memory, disk, passthrough
	tierBytes map[string]int64 // memory, disk
}

// cacheTierFigures maps cache.Stats to the per-tier metrics.
func cacheTierFigures(st cache.Stats) tierFigures {
	return tierFigures{
		hitBytes: map[string]int64{
			"memory":      st.MemoryHitBytes,
			"disk":        st.DiskHitBytes,
			"passthrough": st.PassthroughBytes,
		},
		tierBytes: map[string]int64{"memory": st.MemoryBytes, "disk": st.DiskBytes},
	}
}

// serveFrom exports the bytes an input mount's view of the cache served.
func (m *mountMetrics) serveFrom(v *cache.View) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricMountReadBytes, ConstLabels: m.labels,
		Help: "Bytes the daemon served to readers of an input mount (reads the kernel serves by passthrough are not seen)."},
		func() float64 { return float64(v.Stats().BytesServed) }))
}

// nodeCollector exports the node-wide cache figures at scrape time.
type nodeCollector struct {
	n        *Node
	hitDesc  *prometheus.Desc
	sizeDesc *prometheus.Desc
	mounts   *prometheus.Desc
	waiting  *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	return &nodeCollector{
		n:        n,
		hitDesc:  prometheus.NewDesc(MetricCacheHitBytes, "Bytes served from the node's cache, by tier (memory, disk, passthrough).", []string{"tier"}, nil),
		sizeDesc: prometheus.NewDesc(MetricCacheBytes, "Bytes the node's cache holds, by tier.", []string{"tier"}, nil),
		mounts:   prometheus.NewDesc(MetricMounts, "Mounts served, by kind (input, output).", []string{"kind"}, nil),
		waiting: prometheus.NewDesc(MetricMountsWaiting,
			"Mounts restored after a restart that wait for their client's credentials (a pod's republish) and are not served meanwhile.", nil, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hitDesc
	ch <- c.sizeDesc
	ch <- c.mounts
	ch <- c.waiting
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if f, ok := c.n.cacheFigures(); ok {
		for tier, v := range f.hitBytes {
			ch <- prometheus.MustNewConstMetric(c.hitDesc, prometheus.CounterValue, float64(v), tier)
		}
		for tier, v := range f.tierBytes {
			ch <- prometheus.MustNewConstMetric(c.sizeDesc, prometheus.GaugeValue, float64(v), tier)
		}
	}
	in, out := c.n.countMounts()
	ch <- prometheus.MustNewConstMetric(c.mounts, prometheus.GaugeValue, float64(in), "input")
	ch <- prometheus.MustNewConstMetric(c.mounts, prometheus.GaugeValue, float64(out), "output")
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(c.n.countWaiting()))
}

// gatherers is the node registry followed by every live mount's.
type gatherers struct {
	n *Node
}

func (g gatherers) Gather() (mfs []*dto.MetricFamily, err error) {
	gs := prometheus.Gatherers{g.n.reg}
	g.n.mu.Lock()
	for _, m := range g.n.mounts {
		if m.live() {
			gs = append(gs, m.metrics.reg)
		}
	}
	g.n.mu.Unlock()
	return gs.Gather()
}

// MetricsHandler serves the node's metrics in the Prometheus formats.
func (n *Node) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(gatherers{n}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Handler serves /metrics and /healthz (200 while the node is open).
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", n.MetricsHandler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if n.isClosed() {
			http.Error(w, "closing", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

func newNodeRegistry(n *Node) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newNodeCollector(n), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// backendFigures sums this mount's backend counters.
func (m *mountMetrics) backendFigures() (readBytes, requests int64) {
	var d dto.Metric
	if m.backendBytes.Write(&d) == nil {
		readBytes = int64(d.GetCounter().GetValue())
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { m.backendReqs.Collect(ch); close(ch) }()
	for c := range ch {
		var d dto.Metric
		if c.Write(&d) == nil {
			requests += int64(d.GetCounter().GetValue())
		}
	}
	return readBytes, requests
}
