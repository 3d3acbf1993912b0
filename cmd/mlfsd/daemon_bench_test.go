package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// BenchmarkDaemonSharedColdRead: 4 jobs read the same 1 GiB dataset, cold,
// each through its own mount of one daemon, against one job alone on a
// fresh daemon. The store (the OSS emulator) must serve the dataset about
// once in all; the figures are aggregate MB/s of the jobs.
//
//	go test -run '^$' -bench DaemonSharedColdRead -benchtime 1x ./cmd/mlfsd/
func BenchmarkDaemonSharedColdRead(b *testing.B) {
	const (
		files    = 16
		fileSize = 64 << 20
		jobs     = 4
		workers  = 4 // readers per job, like data-loader workers
	)
	total := int64(files * fileSize)
	root := b.TempDir()
	ds := filepath.Join(root, "bkt", "ds")
	os.MkdirAll(ds, 0o755)
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, fileSize)
	for i := range files {
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(ds, fmt.Sprintf("shard-%02d.bin", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	srv, endpoint := ossemutest.Start(b, root, ossemu.Options{})
	b.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)

	// phase mounts the dataset n times on a fresh daemon (cold cache) and
	// has n jobs read all of it at once; it returns the aggregate MB/s and
	// the bytes the store sent.
	phase := func(n int) (mbps float64, storeBytes int64) {
		d := startNodeDaemon(b, b.TempDir(), append([]string{"--oss-endpoint", endpoint, "--cache-memory", "1GiB"}, daemonBenchFlags()...)...)
		var mnts []string
		for range n {
			mnt := b.TempDir()
			if code, _, errOut := d.client(b, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/ds/", mnt); code != 0 {
				b.Fatalf("mount: %s", errOut)
			}
			mnts = append(mnts, mnt)
		}
		before := srv.Stats()["bytes.out"]
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n*workers)
		for _, mnt := range mnts {
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rbuf := make([]byte, 1<<20)
					for i := w; i < files; i += workers {
						f, err := os.Open(filepath.Join(mnt, fmt.Sprintf("shard-%02d.bin", i)))
						if err != nil {
							errs <- err
							return
						}
						nr, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, rbuf)
						f.Close()
						if err != nil || nr != fileSize {
							errs <- fmt.Errorf("read %d bytes, %v", nr, err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		for _, mnt := range mnts {
			if code, _, errOut := d.client(b, "umount", "--daemon", d.socket, mnt); code != 0 {
				b.Fatalf("umount: %s", errOut)
			}
		}
		mbps, storeBytes = float64(int64(n)*total)/1e6/elapsed.Seconds(), srv.Stats()["bytes.out"]-before
		d.stop(b)
		// The cache's own account of the phase, for whoever investigates
		// a store figure over the limit.
		if m := regexp.MustCompile(`"msg":"cache: closed"[^}]*`).FindString(d.stderr.String()); m != "" {
			b.Logf("%d job(s): %s", n, m)
		}
		return mbps, storeBytes
	}

	for range b.N {
		one, oneStore := phase(1)
		four, fourStore := phase(jobs)
		b.ReportMetric(one, "MB/s-1job")
		b.ReportMetric(four, "MB/s-4jobs")
		b.ReportMetric(four/one, "x-aggregate")
		b.ReportMetric(float64(fourStore)/float64(1<<30), "GiB-from-store-4jobs")
		b.Logf("1 job: %.0f MB/s, store sent %.3f GiB; %d jobs: %.0f MB/s aggregate (%.2fx), store sent %.3f GiB (limit 1.05)",
			one, float64(oneStore)/(1<<30), jobs, four, four/one, float64(fourStore)/(1<<30))
		if float64(fourStore) > 1.05*float64(total) {
			b.Errorf("%d jobs made the store send %.3f GiB for a 1 GiB dataset; want at most 1.05", jobs, float64(fourStore)/(1<<30))
		}
	}
}

// daemonBenchFlags are extra daemon flags from $MLFSD_BENCH_DAEMON_FLAGS
// (space-separated), to compare cache settings.
func daemonBenchFlags() []string { return strings.Fields(os.Getenv("MLFSD_BENCH_DAEMON_FLAGS")) }
