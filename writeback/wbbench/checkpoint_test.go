package wbbench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/bench"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/writeback"
)

// BenchmarkCheckpoint writes a checkpoint (2 GiB by default; set
// MLFSD_BENCH_CKPT_MIB to change) sequentially in 1 MiB writes, and each
// round measures, in the same run:
//
//	local   writing the same bytes to a file on the staging disk, to close
//	upload  the emulator's upload of the same bytes (backend Write+Commit, no
//	        FUSE), before and after the mount writes; the limit is the mean
//	close   writing through the output mount, until close returns
//	durable writing through the output mount, until the file is in the emulator
//
// The mount is measured twice per round: streaming the file before close
// (--upload-stream-threshold 16MiB) and uploading only after close (the
// default). It reports the medians
// over the rounds of close/local (limit 1.3) and durable/max(local, upload)
// (limit 1.2) for each. Every timed phase starts after a sync, with
// memory primed (see bench.PrimeMemory):
//
//	go test ./writeback/wbbench -run '^$' -bench Checkpoint -benchtime 3x
func BenchmarkCheckpoint(b *testing.B) {
	size := int64(2048) << 20
	if s := os.Getenv("MLFSD_BENCH_CKPT_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("MLFSD_BENCH_CKPT_MIB=%q: want a positive number of MiB", s)
		}
		size = int64(n) << 20
	}
	b.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	b.Setenv("OSS_SESSION_TOKEN", "")
	b.Setenv("OSS_ENDPOINT", "")
	be := startEmulator(b)

	work := b.TempDir() // local disk: baseline file and staging
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>11)
	}
	ratios := map[string][]float64{}
	round := 0
	for b.Loop() {
		round++
		// Local disk. Each phase starts with no dirty pages left by the last.
		local := filepath.Join(work, "local.pt")
		syscall.Sync()
		primeMemory(b, size)
		t0 := time.Now()
		if err := writeSeq(local, chunk, size); err != nil {
			b.Fatal(err)
		}
		tLocal := time.Since(t0)
		os.Remove(local)

		// The emulator's upload of the same bytes, without FUSE or staging,
		// before the mount writes and again after them: the limit is their
		// mean, so a drift of the machine during the round weighs on both
		// sides alike.
		tBefore := directUpload(b, be, fmt.Sprintf("direct-%d.pt", round), chunk, size)

		// Through the output mount: streaming before close, and not.
		type result struct {
			mode             string
			tClose, tDurable time.Duration
		}
		var results []result
		for _, mode := range []struct {
			name      string
			threshold int64
		}{{"stream", 16 << 20}, {"nostream", 0}} {
			tClose, tDurable := mountWrite(b, be, work, fmt.Sprintf("%s-%d", mode.name, round), chunk, size, mode.threshold)
			results = append(results, result{mode.name, tClose, tDurable})
		}
		tAfter := directUpload(b, be, fmt.Sprintf("direct-%d-after.pt", round), chunk, size)
		tUpload := (tBefore + tAfter) / 2

		for _, r := range results {
			cr := r.tClose.Seconds() / tLocal.Seconds()
			dr := r.tDurable.Seconds() / max(tLocal, tUpload).Seconds()
			ratios[r.mode+"-close/local"] = append(ratios[r.mode+"-close/local"], cr)
			ratios[r.mode+"-durable/max(local,upload)"] = append(ratios[r.mode+"-durable/max(local,upload)"], dr)
			b.Logf("round %d, %d MiB, %s: local %v, upload %v (%v before, %v after), close %v, durable %v: close/local %.2f, durable/max(local,upload) %.2f",
				round, size>>20, r.mode, tLocal.Round(time.Millisecond), tUpload.Round(time.Millisecond),
				tBefore.Round(time.Millisecond), tAfter.Round(time.Millisecond),
				r.tClose.Round(time.Millisecond), r.tDurable.Round(time.Millisecond), cr, dr)
		}
	}
	for name, xs := range ratios {
		b.ReportMetric(median(xs), name)
	}
	b.ReportMetric(0, "ns/op")
}

// directUpload stores the checkpoint's bytes in the emulator through the
// backend (Write of each chunk, then Commit), from memory, and returns the
// time it took.
func directUpload(b *testing.B, be backends.Backend, key string, chunk []byte, size int64) time.Duration {
	ctx := context.Background()
	syscall.Sync()
	primeMemory(b, size)
	t0 := time.Now()
	w, err := be.Write(ctx, key, backends.WriteOptions{SizeHint: size})
	if err != nil {
		b.Fatal(err)
	}
	for n := int64(0); n < size; n += int64(len(chunk)) {
		if _, err := w.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	be.Delete(ctx, key)
	return d
}

// mountWrite writes the checkpoint through a fresh output mount staging
// under work, returning the time until close returned and until the file
// was durable in the backend.
func mountWrite(b *testing.B, be backends.Backend, work, name string, chunk []byte, size, threshold int64) (tClose, tDurable time.Duration) {
	ctx := context.Background()
	staging := filepath.Join(work, "staging-"+name)
	st, err := writeback.Open(ctx, be, writeback.Options{StagingDir: staging, StreamThreshold: threshold, Log: slog.Default()})
	if err != nil {
		b.Fatal(err)
	}
	mnt := b.TempDir()
	srv, err := mfs.MountOutput(ctx, mnt, mfs.OutputOptions{Store: st, NoPassthrough: os.Getenv("MLFSD_BENCH_NO_PT") != ""}, mfs.MountOptions{})
	if err != nil {
		b.Fatalf("FUSE mount: %v", err)
	}
	syscall.Sync()
	primeMemory(b, size)
	t0 := time.Now()
	if err := writeSeq(filepath.Join(mnt, "ckpt.pt"), chunk, size); err != nil {
		b.Fatal(err)
	}
	tClose = time.Since(t0)
	if err := st.Drain(ctx, nil); err != nil {
		b.Fatal(err)
	}
	tDurable = time.Since(t0)
	if info, err := be.Stat(ctx, "ckpt.pt"); err != nil || info.Size != size {
		b.Fatalf("checkpoint in the emulator: %+v, %v", info, err)
	}
	if err := srv.Unmount(); err != nil {
		b.Fatal(err)
	}
	st.Close()
	be.Delete(ctx, "ckpt.pt")
	os.RemoveAll(staging)
	return tClose, tDurable
}

// writeSeq writes size bytes to path in len(chunk) writes and closes it.
func writeSeq(path string, chunk []byte, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for n := int64(0); n < size; n += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// primeMemory readies memory for a timed phase that writes a checkpoint of
// size bytes (see bench.PrimeMemory: the VM's free page reporting would
// otherwise charge one phase and not another for its first touches). A
// phase allocates up to three times size in new memory (the staging file,
// the emulator's parts, the object they are assembled into); priming four
// times that costs only untimed seconds.
func primeMemory(b *testing.B, size int64) {
	if err := bench.PrimeMemory(4 * size); err != nil {
		b.Fatal(err)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// startEmulator serves an OSS emulator on loopback and opens the OSS
// backend on one of its buckets.
func startEmulator(b *testing.B) backends.Backend {
	// The emulator stands in for a remote store: its data lives in memory
	// (tmpfs), so storing it does not compete with the staging files for
	// this machine's disk and dirty-page budget as a real store never does.
	root, err := os.MkdirTemp("/dev/shm", "mlfsd-wbbench-")
	if err != nil {
		b.Fatalf("emulator root on tmpfs: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Mkdir(filepath.Join(root, "bkt"), 0o755); err != nil {
		b.Fatal(err)
	}
	_, endpoint := ossemutest.Start(b, root, ossemu.Options{})
	u, err := backends.ParseURI("oss://bkt/ckpt/")
	if err != nil {
		b.Fatal(err)
	}
	be, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return be
}
