package node

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/fs/fstest"
)

// fuseOpens is how many OPEN requests the mount at target answered, from
// the node's metrics.
func fuseOpens(t *testing.T, n *Node, target string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	n.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	prefix := fmt.Sprintf("%s{mount=%q,op=\"open\"} ", MetricFUSERequests, target)
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			return int(f)
		}
	}
	return 0
}

// TestMountOptionInputNoOpen: the mount option input-no-open (a mount
// request's option, as the daemon API, `mlfsd mount --daemon` and CSI
// volume attributes pass it) reaches the input tree: by default a mount
// whose small files are read a second time stops receiving OPEN, and with
// input-no-open=false every open of a third epoch still reaches the
// daemon, and a large file complete in the cache whose pages the kernel
// dropped is opened by passthrough.
func TestMountOptionInputNoOpen(t *testing.T) {
	n := newTestNode(t, "")
	var small []string
	for i := range 20 {
		small = append(small, fmt.Sprintf("d%02d/img%02d", i, i)) // one directory each: no directory warming
	}
	big := randomBytes(t, 3<<20)
	// Each mount reads its own copy: files the other left complete in the
	// node's cache would be opened by passthrough, never held whole by
	// the kernel, and no mount would turn no-open.
	source := func() string {
		t.Helper()
		src := t.TempDir()
		for i, name := range small {
			if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, name), randomBytes(t, 32<<10+i), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(src, "big"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		return src
	}
	epoch := func(mnt string) {
		t.Helper()
		args := make([]string, len(small))
		for i, name := range small {
			args[i] = filepath.Join(mnt, name)
		}
		// In another process: a FUSE server must not serve its own reads.
		if out, err := exec.Command("cat", args...).CombinedOutput(); err != nil {
			t.Fatalf("cat: %v: %s", err, out)
		}
	}
	ctx := t.Context()
	for _, c := range []struct {
		opts   map[string]string
		noOpen bool
	}{{nil, true}, {map[string]string{"input-no-open": "false"}, false}} {
		mnt := t.TempDir()
		if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + source() + "/", Target: mnt, ReadOnly: true, Options: c.opts}); err != nil {
			t.Fatal(err)
		}
		// O_PATH descriptors hold the files' nodes in the kernel (no OPEN
		// is sent): another test's drop_caches running alongside must not
		// make the kernel forget a file between epochs, which would start
		// its count towards no-open mode again.
		held := fstest.HoldNodes(t, mnt, append([]string{"big"}, small...))
		if got := readFile(t, filepath.Join(mnt, "big")); !bytes.Equal(got, big) {
			t.Fatal("big: wrong bytes")
		}
		epoch(mnt)
		epoch(mnt)
		opens := fuseOpens(t, n, mnt)
		epoch(mnt)
		got := fuseOpens(t, n, mnt) - opens
		switch {
		case c.noOpen && got != 0:
			t.Errorf("options %v: a third epoch sent %d OPEN requests, want none (no-open mode)", c.opts, got)
		case !c.noOpen && got != len(small):
			t.Errorf("options %v: a third epoch sent %d OPEN requests, want %d", c.opts, got, len(small))
		}
		if !c.noOpen {
			// Drop the kernel's copy of big, then open it until an open
			// is passthrough (the disk copy completes behind the reader).
			var pt int64
			for i := 0; i < 100 && pt == 0; i++ {
				if out, err := exec.Command("dd", "if="+filepath.Join(mnt, "big"), "iflag=nocache", "count=0", "status=none").CombinedOutput(); err != nil {
					t.Fatalf("dd: %v: %s", err, out)
				}
				if got := readFile(t, filepath.Join(mnt, "big")); !bytes.Equal(got, big) {
					t.Fatal("big: wrong bytes")
				}
				for _, s := range n.Status() {
					if s.Target == mnt {
						pt = s.CacheHitBytes["passthrough"]
					}
				}
			}
			if pt == 0 {
				t.Errorf("options %v: big never opened by passthrough", c.opts)
			}
		}
		held()
		if err := n.Unmount(ctx, mnt); err != nil {
			t.Fatal(err)
		}
	}
}
