package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/cache"
)

// Metric names, for dashboards and tests.
const (
	MetricBackendReadBytes = "mlfsd_backend_read_bytes_total"
	MetricBackendRequests  = "mlfsd_backend_requests_total"
	// MetricBackendLatency is the time of a store request, by operation:
	// to the response's headers for a read, from the start of an upload
	// to its commit for a write.
	MetricBackendLatency = "mlfsd_backend_request_duration_seconds"
	// MetricBackendErrors counts failed store requests by operation and
	// the store's own code (backends.StoreCode), folded to a bounded set.
	MetricBackendErrors      = "mlfsd_backend_errors_total"
	MetricCacheHitBytes      = "mlfsd_cache_hit_bytes_total"
	MetricCacheBytes         = "mlfsd_cache_bytes"
	MetricCacheEvictions     = "mlfsd_cache_evictions_total"
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
	// MetricBuildInfo is 1, labelled with the version, the Go version and
	// the commit of the running binary.
	MetricBuildInfo = "mlfsd_build_info"
	// MetricCredentialsExpiry is when the token a mount's identity
	// exchanges for keys expires (Unix seconds), by credential.
	MetricCredentialsExpiry = "mlfsd_credentials_expiry_timestamp_seconds"
)

// mountMetrics are the instruments of one mount, on a registry of its own
// (every series carries mount=<target>), so that unmounting drops them
// whole and mounting the same target again starts from zero. Series are
// made at the first observation of their labels, never in advance: a
// mount exports only the operations it served (docs/MONITORING.md gives
// the bound).
type mountMetrics struct {
	reg            *prometheus.Registry
	labels         prometheus.Labels
	backendBytes   prometheus.Counter
	backendReqs    *prometheus.CounterVec
	backendLatency *prometheus.HistogramVec
	backendErrors  *prometheus.CounterVec
	fuseReqs       *prometheus.CounterVec
	fuseLatency    *prometheus.HistogramVec
	// fuse holds the instruments of each of fuseOps (same index), made at
	// the operation's first request.
	fuse [len(fuseOps)]atomic.Pointer[fuseInstruments]
}

// newMountMetrics makes the instruments of the mount at target; id, when
// the mount has its own credentials, exports when their token expires.
func newMountMetrics(target string, id *identity) *mountMetrics {
	reg := prometheus.NewRegistry()
	l := prometheus.Labels{"mount": target}
	m := &mountMetrics{
		reg:    reg,
		labels: l,
		backendBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricBackendReadBytes, ConstLabels: l,
			Help: "Bytes read from the store."}),
		backendReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBackendRequests, ConstLabels: l,
			Help: "Requests sent to the store, by operation and result (ok, not_found, canceled, error)."}, []string{"op", "result"}),
		backendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricBackendLatency, ConstLabels: l,
			Help:    "Time of a store request, by operation: to the response headers for a read, from the start of an upload to its commit for write and multipart.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 4, 8)}, []string{"op"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBackendErrors, ConstLabels: l,
			Help: "Failed store requests, by operation and the store's code (OSS/S3 error code, HDFS exception class, NAS errno; NotFound: a not-found answer without a code; other: a code not in mlfsd's list; none: no answer, as for a network error)."},
			[]string{"op", "code"}),
		fuseReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFUSERequests, ConstLabels: l,
			Help: "FUSE requests answered, by operation."}, []string{"op"}),
		fuseLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricFUSELatency, ConstLabels: l,
			Help:    "Time to answer a FUSE request, by operation.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 4, 10)}, []string{"op"}),
	}
	reg.MustRegister(m.backendBytes, m.backendReqs, m.backendLatency, m.backendErrors, m.fuseReqs, m.fuseLatency)
	if id != nil {
		reg.MustRegister(&expiryCollector{id: id, desc: prometheus.NewDesc(MetricCredentialsExpiry,
			"When the token a mount's credentials exchange for keys expires (Unix time, from the token's exp claim), by credential (oss_oidc_token, s3_web_identity_token); the pod's republish brings a new one.",
			[]string{"credential"}, l)})
	}
	return m
}

// request implements backendCounter.
func (m *mountMetrics) request(op string, err error, d time.Duration) {
	m.backendReqs.WithLabelValues(op, resultOf(err)).Inc()
	m.backendLatency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) { // the caller gave up: not the store's failure
		code := backends.StoreCode(err)
		if code == "" && errors.Is(err, backends.ErrNotExist) {
			code = "NotFound" // an answer without a body (a HEAD's 404), as S3 names it
		}
		m.backendErrors.WithLabelValues(op, codeLabel(code)).Inc()
	}
}

// readBytes implements backendCounter.
func (m *mountMetrics) readBytes(n int) {
	if n > 0 {
		m.backendBytes.Add(float64(n))
	}
}

// fuseOps are the operations fs.Observer reports.
var fuseOps = [...]string{"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link",
	"symlink", "readlink", "create", "open", "read", "write", "release", "flush", "fsync", "opendir", "readdir",
	"readdirplus", "statfs"}

// fuseOpIndex is the index of each of fuseOps; read-only.
var fuseOpIndex = func() map[string]int {
	ix := make(map[string]int, len(fuseOps))
	for i, op := range fuseOps {
		ix[op] = i
	}
	return ix
}()

type fuseInstruments struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// observe implements fs.Observer. The instruments of an operation are
// looked up once, at its first request, not at every request.
func (m *mountMetrics) observe(op string, d time.Duration) {
	i, known := fuseOpIndex[op]
	var in *fuseInstruments
	if known {
		in = m.fuse[i].Load()
	}
	if in == nil {
		in = &fuseInstruments{m.fuseReqs.WithLabelValues(op), m.fuseLatency.WithLabelValues(op)}
		if known {
			m.fuse[i].Store(in) // a racing first request stores the same children
		}
	}
	in.count.Inc()
	in.latency.Observe(d.Seconds())
}

// storeCodes are the codes MetricBackendErrors names; any other is
// "other", so that a store inventing codes cannot grow the series without
// bound. OSS and S3 codes, HDFS exception classes, NAS errnos.
var storeCodes = map[string]bool{
	// OSS and S3
	"AccessDenied": true, "NoSuchBucket": true, "NoSuchKey": true, "NoSuchUpload": true,
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "InvalidSecurityToken": true,
	"SecurityTokenExpired": true, "InvalidSecurityToken.Expired": true, "ExpiredToken": true,
	"ExpiredTokenException": true, "RequestTimeTooSkewed": true, "InvalidArgument": true,
	"InvalidObjectName": true, "InvalidRange": true, "InvalidPart": true, "InvalidPartOrder": true,
	"EntityTooLarge": true, "EntityTooSmall": true, "PreconditionFailed": true,
	"ConditionalRequestConflict": true, "FileAlreadyExists": true, "ObjectNotAppendable": true,
	"PositionNotEqualToLength": true, "SlowDown": true, "RequestTimeout": true,
	"InternalError": true, "ServiceUnavailable": true, "QpsLimitExceeded": true,
	"TooManyRequests": true, "Throttling": true, "AuthorizationHeaderMalformed": true,
	"PermanentRedirect": true, "NotFound": true, "Forbidden": true, "BadRequest": true,
	"InvalidBucketName": true, "AllAccessDisabled": true, "KmsServiceNotAvailable": true,
	// HDFS
	"FileNotFoundException": true, "AccessControlException": true, "PathIsNotEmptyDirectoryException": true,
	"FileAlreadyExistsException": true, "AlreadyBeingCreatedException": true,
	"ParentNotDirectoryException": true, "InvalidPathException": true,
	"HadoopIllegalArgumentException": true, "DSQuotaExceededException": true,
	"NSQuotaExceededException": true, "QuotaExceededException": true,
	"UnsupportedOperationException": true, "RpcNoSuchMethodException": true,
	"SafeModeException": true, "RetriableException": true, "StandbyException": true,
	"ObserverRetryOnActiveException": true, "LeaseExpiredException": true,
	"RecoveryInProgressException": true, "NotReplicatedYetException": true,
	"SecretManager$InvalidToken": true, "IOException": true,
	// NAS
	"ENOENT": true, "EACCES": true, "EPERM": true, "EEXIST": true, "ENOTEMPTY": true,
	"ENOTDIR": true, "EISDIR": true, "ENOSPC": true, "EDQUOT": true, "EIO": true,
	"EROFS": true, "ESTALE": true, "ETIMEDOUT": true, "EINVAL": true, "ENAMETOOLONG": true,
	"EXDEV": true, "EBUSY": true, "EAGAIN": true, "EINTR": true,
}

// codeLabel is the code label of a store code.
func codeLabel(code string) string {
	switch {
	case code == "":
		return "none"
	case storeCodes[code]:
		return code
	}
	return "other"
}

// expiryCollector exports when a mount's identity tokens expire, read at
// scrape time (a republish replaces them).
type expiryCollector struct {
	id   *identity
	desc *prometheus.Desc
}

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	cur := c.id.current()
	for _, t := range []struct{ name, token string }{
		{"oss_oidc_token", cur.OSSOIDCToken},
		{"s3_web_identity_token", cur.S3WebIdentityToken},
	} {
		if exp, ok := tokenExpiry(t.token); ok {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(exp.Unix()), t.name)
		}
	}
}

// tokenExpiry reads the exp claim of a JWT without verifying it: the STS
// verifies the token; this only says when it will stop accepting it. A
// token that is not a JWT with an exp claim has no known expiry.
func tokenExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*claims.Exp), 0), true
}

// tierFigures are the node cache's figures per tier.
type tierFigures struct {
	hitBytes  map[string]int64 // memory, disk, passthrough
	tierBytes map[string]int64 // memory, disk
	evictions int64            // objects evicted from the disk tier
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
		evictions: st.Evictions,
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
	evicted  *prometheus.Desc
	mounts   *prometheus.Desc
	waiting  *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	return &nodeCollector{
		n:        n,
		hitDesc:  prometheus.NewDesc(MetricCacheHitBytes, "Bytes served from the node's cache, by tier (memory, disk, passthrough).", []string{"tier"}, nil),
		sizeDesc: prometheus.NewDesc(MetricCacheBytes, "Bytes the node's cache holds, by tier.", []string{"tier"}, nil),
		evicted: prometheus.NewDesc(MetricCacheEvictions,
			"Objects removed from the node's disk cache to make room (with a low hit ratio, the cache is too small for the working set).", nil, nil),
		mounts: prometheus.NewDesc(MetricMounts, "Mounts served, by kind (input, output).", []string{"kind"}, nil),
		waiting: prometheus.NewDesc(MetricMountsWaiting,
			"Mounts restored after a restart that wait for their client's credentials (a pod's republish) and are not served meanwhile.", nil, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hitDesc
	ch <- c.sizeDesc
	ch <- c.evicted
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
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(f.evictions))
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
	reg.MustRegister(newNodeCollector(n), buildInfo(n.opt.Version), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// buildInfo is MetricBuildInfo of a binary of version ("" reads as
// "dev"): 1, with the version, the Go version and the commit (from the
// build's VCS stamp; "unknown" without one) as labels.
func buildInfo(version string) prometheus.Gauge {
	if version == "" {
		version = "dev"
	}
	commit := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				commit = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricBuildInfo,
		Help:        "1, labelled with the running binary's version, Go version and commit.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version(), "commit": commit}})
	g.Set(1)
	return g
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
