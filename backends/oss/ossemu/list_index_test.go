package ossemu_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// TestListWideDirChanges: a paged listing of a directory wide enough to
// be indexed sees what changes between its pages, whether the emulator
// wrote it (PutObject, DeleteObject) or something else did on its disk,
// both right after the index was built (within one timestamp tick) and
// once the index is old enough to be trusted. Keys before the marker are
// never listed again, as on the stores.
func TestListWideDirChanges(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			e := start(t, ossemu.Options{})
			const n = 1000
			seedWideDir(t, e.root, "d", n)
			dir := e.path("d")
			if trusted {
				waitSettled(t, dir)
			}
			want := map[string]bool{}
			for i := 0; i < n; i++ {
				want[fmt.Sprintf("d/k%06d", i)] = true
			}
			var got []string
			marker := ""
			page := func() bool {
				t.Helper()
				r, err := e.bucket.ListObjects(alioss.Prefix("d/"), alioss.Marker(marker), alioss.MaxKeys(50))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range r.Objects {
					got = append(got, o.Key)
				}
				marker = r.NextMarker
				return r.IsTruncated
			}
			page()
			page() // from the index, when trusted
			// Behind the emulator's back: one key after the marker added,
			// one removed, one added before it (not to be listed).
			for _, k := range []string{"k000500x", "k000000a"} {
				if err := os.WriteFile(filepath.Join(dir, k), []byte("y"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(filepath.Join(dir, "k000400")); err != nil {
				t.Fatal(err)
			}
			want["d/k000500x"], want["d/k000400"] = true, false
			more := true
			for more && marker < "d/k000500x" {
				more = page()
			}
			var at int
			if _, err := fmt.Sscanf(marker, "d/k%06d", &at); !more || err != nil || at+7 >= n {
				t.Fatalf("paging stopped at %q", marker)
			}
			// Through the emulator, after the marker.
			put, del := fmt.Sprintf("d/k%06dy", at+3), fmt.Sprintf("d/k%06d", at+6)
			if err := e.bucket.PutObject(put, strings.NewReader("z")); err != nil {
				t.Fatal(err)
			}
			if err := e.bucket.DeleteObject(del); err != nil {
				t.Fatal(err)
			}
			want[put], want[del] = true, false
			for page() {
			}
			var wantKeys []string
			for k, ok := range want {
				if ok {
					wantKeys = append(wantKeys, k)
				}
			}
			slices.Sort(wantKeys)
			if !slices.Equal(got, wantKeys) {
				t.Fatalf("listed %d keys, want %d; first difference: %s", len(got), len(wantKeys), firstDiff(got, wantKeys))
			}
		})
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %q, want %q", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}

// waitSettled polls (no event signals the passing of time) until dir's
// last change is 1.5 s old: an index of it built from then on is trusted
// (one built within a second of the change is rebuilt at every use).
func waitSettled(tb testing.TB, dir string) {
	tb.Helper()
	testwait.Eventually(tb, func() bool {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			tb.Fatal(err)
		}
		return time.Since(time.Unix(0, st.Ctim.Nano())) > 1500*time.Millisecond
	}, "%s to stop changing", dir)
}
