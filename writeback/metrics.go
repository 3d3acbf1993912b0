package writeback

import (
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
}

func newMetrics(reg prometheus.Registerer, backendID string) (*metrics, error) {
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
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.uploads, m.uploadedBytes, m.permanentFails, m.queueDepth, m.stagedBytes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
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
