package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// benchBackends opens the same emulator bucket through the s3 backend and,
// as the reference, through the oss backend: same server, same data, so
// the ratio of their MB/s is what the client side costs.
func benchBackends(b *testing.B, e *emu) map[string]backends.Backend {
	b.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	b.Setenv("OSS_SESSION_TOKEN", "")
	u, err := backends.ParseURI("oss://" + testBucket + "/data/")
	if err != nil {
		b.Fatal(err)
	}
	ob, err := oss.New(context.Background(), u, oss.Options{Endpoint: e.endpoint}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ob.Close() })
	return map[string]backends.Backend{"oss": ob, "s3": openURI(b, "s3://"+testBucket+"/data/?endpoint="+e.endpoint, Options{})}
}

// BenchmarkRead reads a 256 MiB object from the emulator whole and as 8
// parallel streams of 8 MiB ranges (a prefetcher's pattern), and 256
// objects of 256 KiB (a shared tier's blocks, 8 readers), through the s3
// backend and the oss backend, with the file read straight from the
// emulator's disk (page cache) as the limit. The figures are ratios of
// MB/s in one run:
//
//	go test ./backends/s3 -run '^$' -bench Read -count 3
func BenchmarkRead(b *testing.B) {
	setCreds(b)
	const size = 256 << 20
	e := startEmu(b, ossemu.Options{})
	dir := filepath.Join(e.root, testBucket, "data")
	os.MkdirAll(filepath.Join(dir, "blocks"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "big"), patterned(size, 9), 0o644); err != nil {
		b.Fatal(err)
	}
	const blocks, blockSize = 256, 256 << 10
	for i := range blocks {
		if err := os.WriteFile(filepath.Join(dir, "blocks", fmt.Sprint(i)), patterned(blockSize, uint64(i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := b.Context()
	b.Run("disk", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 1<<20)
		for b.Loop() {
			f, err := os.Open(filepath.Join(dir, "big"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	for _, name := range []string{"oss", "s3"} {
		be := benchBackends(b, e)[name]
		info, err := be.Stat(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		for i := range blocks { // the emulator hashes seeded files once
			if _, err := be.Stat(ctx, fmt.Sprint("blocks/", i)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name+"-whole", func(b *testing.B) {
			b.SetBytes(size)
			buf := make([]byte, 1<<20)
			for b.Loop() {
				r, err := be.Read(ctx, "big", backends.ReadOptions{Length: -1})
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.CopyBuffer(io.Discard, r, buf); err != nil || n != size {
					b.Fatal(n, err)
				}
				r.Close()
			}
		})
		b.Run(name+"-ranges-8x8MiB", func(b *testing.B) {
			b.SetBytes(size)
			const chunk = 8 << 20
			for b.Loop() {
				parallel(b, 8, size/chunk, func(i int, buf []byte) {
					r, err := be.Read(ctx, "big", backends.ReadOptions{Offset: int64(i) * chunk, Length: chunk, IfVersion: info.Version})
					if err != nil {
						b.Error(err)
						return
					}
					if n, err := io.CopyBuffer(io.Discard, r, buf); err != nil || n != chunk {
						b.Error(n, err)
					}
					r.Close()
				})
			}
		})
		b.Run(name+"-blocks-256KiB", func(b *testing.B) {
			b.SetBytes(blocks * blockSize)
			for b.Loop() {
				parallel(b, 8, blocks, func(i int, buf []byte) {
					r, err := be.Read(ctx, fmt.Sprint("blocks/", i), backends.ReadOptions{Length: -1})
					if err != nil {
						b.Error(err)
						return
					}
					if n, err := io.CopyBuffer(io.Discard, r, buf); err != nil || n != blockSize {
						b.Error(n, err)
					}
					r.Close()
				})
			}
		})
	}
}

// BenchmarkWrite writes 64 blocks of 1 MiB (a shared tier's writes, 8 at a
// time) and one 128 MiB object (multipart, 8 MiB parts, 4 at a time)
// through the s3 and oss backends, with the same bytes written to a local
// file as the limit:
//
//	go test ./backends/s3 -run '^$' -bench Write -count 3
func BenchmarkWrite(b *testing.B) {
	setCreds(b)
	e := startEmu(b, ossemu.Options{})
	const big, blocks, blockSize = 128 << 20, 64, 1 << 20
	data := patterned(big, 5)
	b.Run("disk", func(b *testing.B) {
		b.SetBytes(big)
		p := filepath.Join(b.TempDir(), "f")
		for b.Loop() {
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	ctx := b.Context()
	for _, name := range []string{"oss", "s3"} {
		be := benchBackends(b, e)[name]
		b.Run(name+"-blocks-1MiB", func(b *testing.B) {
			b.SetBytes(blocks * blockSize)
			for b.Loop() {
				parallel(b, 8, blocks, func(i int, _ []byte) {
					if _, err := putAll(ctx, be, fmt.Sprint("wblocks/", i), data[i*blockSize:(i+1)*blockSize]); err != nil {
						b.Error(err)
					}
				})
			}
		})
		b.Run(name+"-multipart-128MiB", func(b *testing.B) {
			b.SetBytes(big)
			for b.Loop() {
				if _, err := putAll(ctx, be, "wbig", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// parallel runs fn(i, buf) for i in [0, n) on workers goroutines.
func parallel(b *testing.B, workers, n int, fn func(i int, buf []byte)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for i := range next {
				fn(i, buf)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func putAll(ctx context.Context, be backends.Backend, key string, data []byte) (backends.ObjectInfo, error) {
	w, err := be.Write(ctx, key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
		w.Abort(ctx)
		return backends.ObjectInfo{}, err
	}
	return w.Commit(ctx)
}
