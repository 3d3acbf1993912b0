package ossemu_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// wideDirKeys is the size of the one directory BenchmarkListWideDir lists.
const wideDirKeys = 100_000

// seedWideDir writes n small files into dir/ of the bucket, as a data set
// copied onto the emulator's disk (not through it) would be.
func seedWideDir(tb testing.TB, root, dir string, n int) {
	tb.Helper()
	d := filepath.Join(root, bucketName, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("k%06d", i)), []byte("x"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// listAll pages through prefix with the SDK's ListObjects (V1, marker) or
// ListObjectsV2 (continuation token), 1000 keys a page, and returns the
// keys and common prefixes seen and the pages it took.
func listAll(tb testing.TB, b *alioss.Bucket, v2 bool, prefix, delim string) (keys, pages int) {
	tb.Helper()
	marker, token := "", ""
	for {
		pages++
		opts := []alioss.Option{alioss.Prefix(prefix), alioss.Delimiter(delim), alioss.MaxKeys(1000)}
		var truncated bool
		if v2 {
			if token != "" {
				opts = append(opts, alioss.ContinuationToken(token))
			}
			r, err := b.ListObjectsV2(opts...)
			if err != nil {
				tb.Fatal(err)
			}
			keys += len(r.Objects) + len(r.CommonPrefixes)
			truncated, token = r.IsTruncated, r.NextContinuationToken
		} else {
			r, err := b.ListObjects(append(opts, alioss.Marker(marker))...)
			if err != nil {
				tb.Fatal(err)
			}
			keys += len(r.Objects) + len(r.CommonPrefixes)
			truncated, marker = r.IsTruncated, r.NextMarker
		}
		if !truncated {
			return keys, pages
		}
	}
}

// BenchmarkListWideDir: one full paged listing (max-keys 1000) of a
// directory of 10,000 and of 100,000 keys through the aliyun Go SDK, V1
// with markers and V2 with continuation tokens, without and with a
// delimiter. An index per directory makes each page cost O(page), so the
// ns/key of the two sizes are alike (near-linear); a read and sort of the
// whole directory per page made the listing quadratic. Reported: ns per
// full listing and per key.
func BenchmarkListWideDir(b *testing.B) {
	for _, n := range []int{wideDirKeys / 10, wideDirKeys} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { benchListWideDir(b, n) })
	}
}

func benchListWideDir(b *testing.B, n int) {
	root := b.TempDir()
	if err := os.Mkdir(filepath.Join(root, bucketName), 0o755); err != nil {
		b.Fatal(err)
	}
	seedWideDir(b, root, "wide", n)
	_, endpoint := ossemutest.Start(b, root, ossemu.Options{})
	client, err := alioss.New(endpoint, ossemutest.AccessKeyID, ossemutest.AccessKeySecret, alioss.ForcePathStyle(true))
	if err != nil {
		b.Fatal(err)
	}
	bkt, err := client.Bucket(bucketName)
	if err != nil {
		b.Fatal(err)
	}
	// The first listing hashes the seeded files for their ETags, and the
	// directory's index is not trusted within a second of its last
	// change: neither is what is measured.
	if got, _ := listAll(b, bkt, false, "wide/", ""); got != n {
		b.Fatalf("listed %d keys, want %d", got, n)
	}
	waitSettled(b, filepath.Join(root, bucketName, "wide"))
	for _, c := range []struct {
		name          string
		v2            bool
		prefix, delim string
	}{
		{"V1", false, "wide/", ""},
		{"V2", true, "wide/", ""},
		{"V1Delimiter", false, "wide/", "/"},
		{"V2Delimiter", true, "wide/", "/"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				got, pages := listAll(b, bkt, c.v2, c.prefix, c.delim)
				if got != n || pages != n/1000 {
					b.Fatalf("listed %d keys in %d pages, want %d in %d", got, pages, n, n/1000)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}
