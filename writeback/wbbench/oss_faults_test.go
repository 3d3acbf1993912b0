package wbbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/writeback"
)

// emulator serves an OSS emulator with opt on loopback and returns the
// server and the OSS backend opened on one of its buckets.
func emulator(t testing.TB, opt ossemu.Options, retry oss.RetryOptions) (*ossemu.Server, backends.Backend) {
	t.Helper()
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bkt"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, endpoint := ossemutest.Start(t, root, opt)
	u, err := backends.ParseURI("oss://bkt/out/")
	if err != nil {
		t.Fatal(err)
	}
	// Parts of 1 MiB past 2 MiB: the larger files go up as multipart.
	be, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint, PartSize: 1 << 20, MultipartThreshold: 2 << 20, Retry: retry}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return srv, be
}

// TestOSSFaultsRetriedNothingLost uploads files of many sizes (single PUT
// and multipart) through a Store to an OSS emulator that fails a fifth of
// its requests (500, 503, connection resets, truncations). Faults that
// outlast the OSS backend's own retries reach the Store, which retries
// them: every file must land byte-identical.
func TestOSSFaultsRetriedNothingLost(t *testing.T) {
	srv, be := emulator(t, ossemu.Options{Seed: 7},
		// One try per request: every fault reaches the Store.
		oss.RetryOptions{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, MaxElapsed: 10 * time.Second})
	reg := prometheus.NewRegistry()
	st, err := writeback.Open(context.Background(), be, writeback.Options{StagingDir: t.TempDir(),
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 50,
		StreamThreshold: 2 << 20, Registry: reg, Log: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv.SetFaults(0.2) // after the backend's start-up checks
	ctx := context.Background()
	want := map[string][]byte{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 24; i++ {
		size := []int{0, 1, 4096, 300 << 10, 1<<20 + 1, 5 << 20}[i%6]
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		key := fmt.Sprintf("d%d/f%02d.bin", i%3, i)
		want[key] = data
		h, err := st.Open(ctx, key, nil, writeback.OpenFlags{Write: true, Truncate: true})
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); off += 256 << 10 {
			if _, err := h.WriteAt(ctx, data[off:min(off+256<<10, len(data))], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := st.Drain(dctx, nil); err != nil {
		t.Fatal(err)
	}
	faults := int64(0)
	for k, v := range srv.Stats() {
		if len(k) > 6 && k[:6] == "fault." {
			faults += v
		}
	}
	if faults == 0 {
		t.Fatal("the emulator injected no faults; the test proves nothing")
	}
	if srv.Stats()["UploadPart"] == 0 {
		t.Fatal("no file went up as a multipart upload")
	}
	retries := 0.0
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mlfsd_writeback_uploads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "retry" {
					retries += m.GetCounter().GetValue()
				}
			}
		}
	}
	if retries == 0 {
		t.Fatal("no upload was retried by the Store; the test proves nothing")
	}
	t.Logf("%d faults injected, %v uploads retried", faults, retries)
	srv.SetFaults(0)
	for key, data := range want {
		rd, err := be.Read(ctx, key, backends.ReadOptions{Length: -1})
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		got, err := io.ReadAll(rd)
		rd.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes (err %v), want %d", key, len(got), err, len(data))
		}
	}
}
