package oss

import (
	"io"
	"os"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// BenchmarkRead reads a 256 MiB object from the emulator through the
// backend, and the same file straight from the emulator's disk (page cache)
// as the limit. The figure is the ratio of the MB/s of "whole" or
// "ranges-8x8MiB" to "disk", from one run:
//
//	go test ./backends/oss -run '^$' -bench Read -count 3
func BenchmarkRead(b *testing.B) {
	setCreds(b)
	const size = 256 << 20
	e := startEmu(b, ossemu.Options{})
	e.seed(b, "big", patterned(size, 9))
	be := openURI(b, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint})
	ctx := b.Context()
	info, err := be.Stat(ctx, "big")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("disk", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 1<<20)
		for b.Loop() {
			f, err := os.Open(e.disk("big"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("whole", func(b *testing.B) {
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
	b.Run("ranges-8x8MiB", func(b *testing.B) {
		b.SetBytes(size)
		const chunk = 8 << 20
		for b.Loop() {
			var wg sync.WaitGroup
			next := make(chan int64)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 1<<20)
					for off := range next {
						r, err := be.Read(ctx, "big", backends.ReadOptions{Offset: off, Length: chunk, IfVersion: info.Version})
						if err != nil {
							b.Error(err)
							continue
						}
						if n, err := io.CopyBuffer(io.Discard, r, buf); err != nil || n != chunk {
							b.Error(n, err)
						}
						r.Close()
					}
				}()
			}
			for off := int64(0); off < size; off += chunk {
				next <- off
			}
			close(next)
			wg.Wait()
		}
	})
}
