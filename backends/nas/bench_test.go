package nas

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// BenchmarkRangedRead reads a 64 MiB file in 1 MiB ranges through the
// backend ("backend") and, as the limit to compare against in the same run,
// with pread on one open file ("os"). The ratio of the two MB/s figures is
// the backend's overhead (openat2, fstat and a reader per range).
func BenchmarkRangedRead(b *testing.B) {
	const size, chunk = 64 << 20, 1 << 20
	root := b.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(root, "blob"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunk)
	b.Run("backend", func(b *testing.B) {
		be := openDir(b, root)
		defer be.Close()
		b.SetBytes(size)
		for b.Loop() {
			for off := int64(0); off < size; off += chunk {
				r, err := be.Read(b.Context(), "blob", backends.ReadOptions{Offset: off, Length: chunk})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		}
	})
	b.Run("os", func(b *testing.B) {
		f, err := os.Open(filepath.Join(root, "blob"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(size)
		for b.Loop() {
			for off := int64(0); off < size; off += chunk {
				if _, err := f.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
