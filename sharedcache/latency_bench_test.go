package sharedcache_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// BenchmarkTierReadLatency measures the distribution of one block read
// from the tier (what Options.Timeout bounds: request, body, checks), the
// figure the default timeout is set from. The tier is an OSS emulator on
// loopback holding 420 blocks of 1 MiB (the dataset); readers
// (16, and 64) read every block once, with
// a deadline of a minute so that none falls back and the whole tail is
// seen. readers=64 is the node cache's default of requests in flight. Run it on a loaded node, e.g. with a busy loop on every core:
//
//	for i in 1 2; do (while :; do :; done) & done
//	go test -run '^$' -bench TierReadLatency -benchtime 3x ./sharedcache/
func BenchmarkTierReadLatency(b *testing.B) {
	b.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	const blocks = 420
	root := b.TempDir()
	srcDir := filepath.Join(root, "src")
	os.MkdirAll(srcDir, 0o755)
	buf := make([]byte, 1<<20)
	for i := range blocks {
		for k := range buf {
			buf[k] = byte(i + k)
		}
		os.WriteFile(filepath.Join(srcDir, fmt.Sprint(i)), buf, 0o644)
	}
	os.MkdirAll(filepath.Join(root, "tier", "bkt"), 0o755)
	_, ep := ossemutest.Start(b, filepath.Join(root, "tier"), ossemu.Options{})
	src := openNAS(b, srcDir)
	defer src.Close()
	store := openOSS(b, "oss://bkt/t/", ep, 2)
	tier, err := sharedcache.New(store, sharedcache.Options{Key: benchKey, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer tier.Close()
	through := tier.Through(src)
	infos := make([]backends.ObjectInfo, blocks)
	for i := range blocks {
		if infos[i], err = src.Stat(context.Background(), fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
	read := func(i int) time.Duration {
		start := time.Now()
		r, err := through.Read(context.Background(), infos[i].Key, backends.ReadOptions{Length: infos[i].Size, IfVersion: infos[i].Version})
		if err != nil {
			b.Error(err)
			return 0
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != 1<<20 {
			b.Errorf("block %d: %d bytes, %v", i, n, err)
		}
		return time.Since(start)
	}
	for i := range blocks { // fill the tier
		read(i)
	}
	if err := tier.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, readers := range []int{16, 64} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) { latencies(b, tier, readers, blocks, read) })
	}
}

// latencies reads every block once per iteration with readers in
// parallel and reports the distribution of one block's read.
func latencies(b *testing.B, tier *sharedcache.Tier, readers, blocks int, read func(int) time.Duration) {
	var all []time.Duration
	hits0 := tier.Stats().Hits
	b.ResetTimer()
	for range b.N {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < blocks; i += readers {
					d := read(i)
					mu.Lock()
					all = append(all, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if hits := tier.Stats().Hits - hits0; hits != int64(len(all)) {
		b.Fatalf("%d tier hits for %d reads: some blocks did not come from the tier", hits, len(all))
	}
	slices.Sort(all)
	q := func(p float64) float64 { return all[int(p*float64(len(all)-1))].Seconds() * 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
	b.ReportMetric(all[len(all)-1].Seconds()*1000, "max-ms")
	hist := map[string]int{}
	for _, d := range all {
		switch {
		case d <= 250*time.Millisecond:
			hist["<=250ms"]++
		case d <= time.Second:
			hist["<=1s"]++
		case d <= 2*time.Second:
			hist["<=2s"]++
		case d <= 5*time.Second:
			hist["<=5s"]++
		default:
			hist[">5s"]++
		}
	}
	b.Logf("%d block reads: %v", len(all), hist)
}
