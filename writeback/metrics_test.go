package writeback

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

// gauge returns the value of the one series of name in reg (counter or
// gauge), and whether it exists.
func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// TestMetricsWriteBytesAndUploadLag: bytes written by the kernel straight
// into the staging file (FUSE passthrough) are counted at close like the
// daemon's own writes; an fsync then more writes count each byte once; an
// append to a closed file counts only the appended bytes; the age of the
// oldest pending upload grows while uploads are held and is 0 once they
// are durable.
func TestMetricsWriteBytesAndUploadLag(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	reg := prometheus.NewRegistry()
	s := openStore(t, f, t.TempDir(), func(o *Options) { o.Registry = reg })
	ctx := context.Background()
	if v, ok := gauge(t, reg, MetricOldestPendingAge); !ok || v != 0 {
		t.Fatalf("%s of an empty queue = %v (present %v), want 0", MetricOldestPendingAge, v, ok)
	}
	f.hold() // nothing becomes durable until release
	start := time.Now()

	data := randBytes(7, 4<<20)
	h, kf := ptFile(t, s, "ckpt.pt", true)
	if _, err := kf.WriteAt(data[:3<<20], 0); err != nil {
		t.Fatal(err)
	}
	must(t, h.Sync(ctx, false))
	if _, err := kf.WriteAt(data[3<<20:], 3<<20); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	must(t, h.Release())
	if v, _ := gauge(t, reg, MetricWriteBytes); v != float64(len(data)) {
		t.Errorf("after a passthrough file of %d bytes (fsync half-way): %s = %v", len(data), MetricWriteBytes, v)
	}

	small := randBytes(8, 100<<10)
	writeFile(t, s, "log.txt", small) // through the daemon
	want := float64(len(data) + len(small))
	if v, _ := gauge(t, reg, MetricWriteBytes); v != want {
		t.Errorf("after a daemon-written file: %s = %v, want %v", MetricWriteBytes, v, want)
	}

	// Append to the closed file: only the new bytes count.
	h, err := s.Open(ctx, "log.txt", nil, OpenFlags{Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(ctx, []byte("more\n"), int64(len(small))); err != nil {
		t.Fatal(err)
	}
	must(t, h.Flush(ctx))
	must(t, h.Release())
	want += 5
	if v, _ := gauge(t, reg, MetricWriteBytes); v != want {
		t.Errorf("after an append of 5 bytes: %s = %v, want %v", MetricWriteBytes, v, want)
	}

	// Held uploads: the lag is the age of the first close, and grows.
	age, _ := gauge(t, reg, MetricOldestPendingAge)
	if age <= 0 || age > time.Since(start).Seconds() {
		t.Errorf("%s = %v with uploads held for %v", MetricOldestPendingAge, age, time.Since(start))
	}
	testwait.Eventually(t, func() bool {
		now, _ := gauge(t, reg, MetricOldestPendingAge)
		return now > age
	}, "%s to grow past %v while uploads are held", MetricOldestPendingAge, age)
	f.release()
	drain(t, s)
	if v, _ := gauge(t, reg, MetricOldestPendingAge); v != 0 {
		t.Errorf("%s = %v after a drain, want 0", MetricOldestPendingAge, v)
	}
	wantFile(t, dir, "ckpt.pt", data)
	wantFile(t, dir, "log.txt", append(small, "more\n"...))
}
