package parlist_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/backends/parlist"
)

// BenchmarkWideDirectory lists one directory of 100,000 entries of varied
// names (wideNames) page after page ("pages", the limit to compare with in
// the same run) and in ranges at once ("ranges"), through the OSS emulator
// with 20 ms to first byte and 100 MB/s per connection, and through NAS:
//
//	go test -run '^$' -bench WideDirectory -benchtime 3x ./backends/parlist/
func BenchmarkWideDirectory(b *testing.B) {
	root := b.TempDir()
	files, dirs := wideNames(100_000)
	writeTree(b, filepath.Join(root, bucket, "wide"), files, dirs)
	want := len(files) + len(dirs)

	b.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	b.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	b.Setenv("OSS_SESSION_TOKEN", "")
	b.Setenv("OSS_ENDPOINT", "")
	_, endpoint := ossemutest.Start(b, root, ossemu.Options{TTFB: 20 * time.Millisecond, ConnBandwidth: 100e6})
	u, err := backends.ParseURI("oss://" + bucket + "/")
	if err != nil {
		b.Fatal(err)
	}
	ob, err := oss.New(context.Background(), u, oss.Options{Endpoint: endpoint}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ob.Close()
	nu, err := backends.ParseURI("nas://" + filepath.Join(root, bucket) + "/")
	if err != nil {
		b.Fatal(err)
	}
	nb, err := nas.New(context.Background(), nu, nas.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer nb.Close()

	opt := backends.ListOptions{Prefix: "wide/"}
	for _, store := range []struct {
		name string
		b    backends.Backend
	}{{"oss", ob}, {"nas", nb}} {
		b.Run(store.name+"/pages", func(b *testing.B) {
			for b.Loop() {
				page := sequential(b, store.b, opt)
				if n := len(page.Objects) + len(page.Prefixes); n != want {
					b.Fatalf("%d entries, want %d", n, want)
				}
			}
		})
		b.Run(store.name+"/ranges", func(b *testing.B) {
			for b.Loop() {
				page, err := parlist.List(b.Context(), store.b, opt, parlist.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if n := len(page.Objects) + len(page.Prefixes); n != want {
					b.Fatalf("%d entries, want %d", n, want)
				}
			}
		})
	}
}
