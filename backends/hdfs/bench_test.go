package hdfs_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
)

// BenchmarkSequentialRead reads one 64 MiB file (in 8 MiB blocks, so
// block switches count) through the backend and the emulator, next to its limit measured in the same run: reading the same
// file from the local disk the emulator serves it from. Compare the MB/s
// of the two sub-benchmarks (medians of -count=3 or more):
//
//	go test -run '^$' -bench SequentialRead -count 5 ./backends/hdfs/
func BenchmarkSequentialRead(b *testing.B) {
	root := b.TempDir()
	const size = 64 << 20
	path := filepath.Join(root, "shard")
	if err := os.WriteFile(path, randData(1, size), 0o644); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.Run("local-disk", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(io.Discard, onlyReader{f}, buf); err != nil || n != size {
				b.Fatal(n, err)
			}
			f.Close()
		}
	})
	b.Run("hdfs-backend", func(b *testing.B) {
		s, err := hdfsemu.New(hdfsemu.Options{Root: root, BlockSize: 8 << 20})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		u, _ := backends.ParseURI("hdfs://" + s.Addr() + "/")
		be, err := hdfs.New(b.Context(), u, hdfs.Options{User: "root"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		b.SetBytes(size)
		for b.Loop() {
			r, err := be.Read(b.Context(), "shard", backends.ReadOptions{Length: -1})
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(io.Discard, onlyReader{r}, buf); err != nil || n != size {
				b.Fatal(n, err)
			}
			r.Close()
		}
	})
}

// onlyReader hides WriterTo, so both sides copy through the same buffer.
type onlyReader struct{ io.Reader }
