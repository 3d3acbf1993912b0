package sharedcache

import "github.com/prometheus/client_golang/prometheus"

// Metric names, for dashboards and tests (the node registry serves them).
const (
	MetricHits     = "mlfsd_shared_cache_hits_total"
	MetricHitBytes = "mlfsd_shared_cache_hit_bytes_total"
	MetricMisses   = "mlfsd_shared_cache_misses_total"
	MetricCorrupt  = "mlfsd_shared_cache_corrupt_blocks_total"
	// MetricUnauthenticated counts the corrupt blocks whose MAC did not
	// verify: written by something without the cluster's key.
	MetricUnauthenticated = "mlfsd_shared_cache_unauthenticated_blocks_total"
	// MetricFull counts blocks not written at the size bound.
	MetricFull        = "mlfsd_shared_cache_full_blocks_total"
	MetricFallbacks   = "mlfsd_shared_cache_fallbacks_total"
	MetricWrites      = "mlfsd_shared_cache_writes_total"
	MetricWriteBytes  = "mlfsd_shared_cache_written_bytes_total"
	MetricWriteErrors = "mlfsd_shared_cache_write_errors_total"
	MetricDropped     = "mlfsd_shared_cache_dropped_blocks_total"
	MetricSweeps      = "mlfsd_shared_cache_sweeps_total"
	MetricSweptBytes  = "mlfsd_shared_cache_swept_bytes_total"
	// Single flight (flight.go).
	MetricFlightsWon     = "mlfsd_shared_cache_flights_won_total"
	MetricFlightWaits    = "mlfsd_shared_cache_flight_waits_total"
	MetricFlightTimeouts = "mlfsd_shared_cache_flight_timeouts_total"
)

// collector exports a Tier's Stats at scrape time.
type collector struct {
	t     *Tier
	descs []*prometheus.Desc
}

// Collector returns a Prometheus collector of the tier's counters, each
// labelled store=<the tier's store>.
func (t *Tier) Collector() prometheus.Collector {
	l := prometheus.Labels{"store": t.store.ID()}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, l) }
	return &collector{t: t, descs: []*prometheus.Desc{
		d(MetricHits, "Blocks served from the shared cache tier."),
		d(MetricHitBytes, "Bytes served from the shared cache tier."),
		d(MetricMisses, "Blocks looked up in the shared cache tier and not found (corrupt ones included)."),
		d(MetricCorrupt, "Blocks of the shared cache tier that failed their header, length, checksum or MAC check (read from the source instead, and overwritten)."),
		d(MetricUnauthenticated, "Blocks of the shared cache tier whose MAC did not verify under the cluster's key: forged, or written by another cluster (counted in corrupt blocks too)."),
		d(MetricFallbacks, "Reads sent to the source because the shared cache tier failed, timed out or was backing off after a failure."),
		d(MetricWrites, "Blocks written to the shared cache tier."),
		d(MetricWriteBytes, "Block bytes written to the shared cache tier."),
		d(MetricWriteErrors, "Block writes to the shared cache tier that failed."),
		d(MetricDropped, "Blocks not written to the shared cache tier: its write queue was full or it was failing."),
		d(MetricFull, "Blocks not written to the shared cache tier because they would have taken it past its size bound."),
		d(MetricSweeps, "Size-bound sweeps of the shared cache tier this node ran under the lease."),
		d(MetricSweptBytes, "Bytes those sweeps deleted."),
		d(MetricFlightsWon, "Blocks this node claimed cluster-wide (single flight) and read from the source."),
		d(MetricFlightWaits, "Blocks this node waited for while another node read them from the source."),
		d(MetricFlightTimeouts, "Waits for another node's block that ran out (the block was read from the source)."),
	}}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.t.Stats()
	for i, v := range []int64{s.Hits, s.HitBytes, s.Misses, s.Corrupt, s.Unauthenticated, s.Fallbacks, s.Writes, s.WriteBytes,
		s.WriteErrors, s.Dropped, s.Full, s.Sweeps, s.SweptBytes, s.FlightsWon, s.FlightWaits, s.FlightTimeouts} {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(v))
	}
}
