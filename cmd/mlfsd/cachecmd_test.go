package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/node"
)

// TestCacheCommandsOffline: `mlfsd cache warm`, `du` and `clear` on a
// cache directory no daemon holds, in this process (the daemon's side is
// tested through its API in node/api): a second warm fetches nothing, du
// shows the dataset, clear drops it.
func TestCacheCommandsOffline(t *testing.T) {
	src, dir := t.TempDir(), t.TempDir()
	for _, name := range []string{"a.bin", "b.bin"} {
		os.WriteFile(filepath.Join(src, name), bytes.Repeat([]byte(name), 200_000), 0o644)
	}
	uri := "nas://" + src + "/"
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr syncBuffer // the node logs to stderr from its goroutines
		args = append(args, "--cache-dir", dir, "--cache-free-floor", "0")
		if code := execute(args, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("mlfsd %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
		}
		return stdout.String()
	}
	if out := run("cache", "warm", uri, "--parallel", "2"); !strings.Contains(out, "2 files") || !strings.Contains(out, "0 cached already") {
		t.Errorf("first warm: %q", out)
	}
	if out := run("cache", "warm", uri); !strings.Contains(out, "2 cached already; 0 B fetched") {
		t.Errorf("second warm: %q; want nothing fetched", out)
	}
	var u node.CacheUsage
	if err := json.Unmarshal([]byte(run("cache", "du", "--json")), &u); err != nil {
		t.Fatal(err)
	}
	if len(u.Datasets) != 1 || u.Datasets[0].Dataset != uri || u.Datasets[0].Complete != 2 || u.Datasets[0].DiskBytes < 2*1_000_000 {
		t.Errorf("du: %+v; want %s's 2 files complete", u.Datasets, uri)
	}
	if out := run("cache", "du"); !strings.Contains(out, uri) {
		t.Errorf("du's table does not name %s:\n%s", uri, out)
	}
	if out := run("cache", "clear", uri); !strings.HasPrefix(out, "cleared 2 objects") {
		t.Errorf("clear: %q", out)
	}
	if err := json.Unmarshal([]byte(run("cache", "du", "--json")), &u); err != nil || len(u.Datasets) != 0 {
		t.Errorf("du after the clear: %+v, %v", u.Datasets, err)
	}
}
