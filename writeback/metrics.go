package writeback

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the Store's Prometheus instruments. They live on the Store,
// never in package globals, and are registered on Options.Registry.
type metrics struct {
	uploads        *prometheus.CounterVec // result: ok, retry, failed
	uploadedBytes  prometheus.Counter
	permanentFails prometheus.Counter
	queueDepth     prometheus.Gauge // closed versions not yet durable
	stagedBytes    prometheus.Gauge // bytes of pending (not yet durable) data
	// writeBytes counts the growth of staged files, seen at each seal
	// (close, fsync): the daemon does not see the writes the kernel sends
	// to a staging file by FUSE passthrough, but it sees the file's size
	// when the writer closes it.
	writeBytes prometheus.Counter
}

// Metric names of the write path, for dashboards and tests.
const (
	// MetricWriteBytes is the bytes written to an output, counted at close
	// and fsync as the growth of the file's staged data, so that writes
	// served by FUSE passthrough count too.
	MetricWriteBytes = "mlfsd_mount_write_bytes_total"
	// MetricOldestPendingAge is the age of the oldest closed file not yet
	// durable in the backend (0 with none): the upload lag.
	MetricOldestPendingAge = "mlfsd_upload_oldest_pending_age_seconds"
)

// newMetrics makes the Store's instruments; oldestPending gives the age of
// the oldest pending version at scrape time.
func newMetrics(reg prometheus.Registerer, backendID string, oldestPending func() float64) (*metrics, error) {
	labels := prometheus.Labels{"backend": backendID}
	m := &metrics{
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlfsd_writeback_uploads_total", Help: "Upload attempts of staged files, by result (ok, retry, failed).",
			ConstLabels: labels,
		}, []string{"result"}),
		uploadedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mlfsd_writeback_uploaded_bytes_total", Help: "Bytes of staged files made durable in the backend.",
			ConstLabels: labels,
		}),
		permanentFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mlfsd_upload_failures_total", Help: "Files that could not be uploaded (kept in staging, reported at drain).",
			ConstLabels: labels,
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mlfsd_upload_pending_files", Help: "Closed files waiting to become durable in the backend.",
			ConstLabels: labels,
		}),
		stagedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mlfsd_upload_pending_bytes", Help: "Bytes of closed files not yet durable in the backend.",
			ConstLabels: labels,
		}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricWriteBytes, Help: "Bytes written to files of the output, counted when each is closed or fsynced as the growth of its staged data (so writes served by FUSE passthrough count too; rewrites in place that do not grow a file are not counted).",
			ConstLabels: labels,
		}),
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricOldestPendingAge, Help: "Age of the oldest closed file not yet durable in the backend (seconds since its close; 0 when none waits).",
		ConstLabels: labels,
	}, oldestPending)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.uploads, m.uploadedBytes, m.permanentFails, m.queueDepth, m.stagedBytes, m.writeBytes, age} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// oldestPendingAge is the seconds since the oldest pending version was
// sealed (its journal sequence is its seal time, kept across restarts).
// A version that replaced an older pending one of the same file counts
// from its own seal: the older bytes no longer need uploading.
func (s *Store) oldestPendingAge() float64 {
	var oldest int64
	s.mu.Lock()
	for _, e := range s.entries {
		if e.pend != nil && (oldest == 0 || e.pend.seq < oldest) {
			oldest = e.pend.seq
		}
	}
	s.mu.Unlock()
	if oldest == 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, oldest)).Seconds())
}

// UploadStats are a Store's upload queue figures.
type UploadStats struct {
	// PendingFiles and PendingBytes: closed files not yet durable.
	PendingFiles, PendingBytes int64
	// FailedFiles: files that could not be uploaded since the Store opened.
	FailedFiles int64
}

// UploadStats returns the upload queue figures.
func (s *Store) UploadStats() UploadStats {
	s.mu.Lock()
	u := UploadStats{PendingFiles: int64(s.pending.files), PendingBytes: int64(s.pending.bytes)}
	s.mu.Unlock()
	var d dto.Metric
	if s.m.permanentFails.Write(&d) == nil {
		u.FailedFiles = int64(d.GetCounter().GetValue())
	}
	return u
}
