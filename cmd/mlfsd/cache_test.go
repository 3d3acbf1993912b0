package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// cacheMount is a read-only `mlfsd mount` subprocess.
type cacheMount struct {
	t      *testing.T
	mnt    string
	d      *daemon
	stderr *syncBuffer
}

// stop unmounts with SIGTERM and checks a clean exit; it may be called again.
func (m *cacheMount) stop() {
	if err := m.d.stop(m.t); err != nil {
		m.t.Errorf("mlfsd mount exited with %v; stderr:\n%s", err, m.stderr)
	}
}

// startCacheMount mounts uri read-only at a new mountpoint with extra flags.
func startCacheMount(t *testing.T, uri string, flags ...string) *cacheMount {
	t.Helper()
	mnt := t.TempDir()
	args := append([]string{"mount", "--read-only"}, flags...)
	args = append(args, uri, mnt)
	cmd := mlfsdCmd(t, args...)
	cmd.Env = append(cmd.Env, "OSS_ACCESS_KEY_ID="+ossemutest.AccessKeyID, "OSS_ACCESS_KEY_SECRET="+ossemutest.AccessKeySecret)
	d := startDaemon(t, cmd, mnt)
	return &cacheMount{t: t, mnt: mnt, d: d, stderr: d.stderr}
}

var statRe = regexp.MustCompile(`(\w+)=(\d+)`)

// cacheStats stops the mount and returns the counters of its closing
// "cache: closed" log line.
func (m *cacheMount) cacheStats() map[string]int64 {
	m.t.Helper()
	m.stop()
	for _, line := range bytes.Split([]byte(m.stderr.String()), []byte("\n")) {
		if !bytes.Contains(line, []byte(`msg="cache: closed"`)) {
			continue
		}
		out := map[string]int64{}
		for _, kv := range statRe.FindAllSubmatch(line, -1) {
			v, _ := strconv.ParseInt(string(kv[2]), 10, 64)
			out[string(kv[1])] = v
		}
		m.t.Logf("cache statistics: %v", out)
		return out
	}
	m.t.Fatalf("no cache statistics in mlfsd's log:\n%s", m.stderr)
	return nil
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMountCacheSurvivesRestartWithPassthrough reads a file through one
// mount, then through a second mount of the same channel and cache dir: the
// second reads nothing from the backend, and (passthrough) its reads never
// enter the daemon. With --no-passthrough the daemon serves the same bytes
// from its disk cache. A file changed in the backend is read afresh.
func TestMountCacheSurvivesRestartWithPassthrough(t *testing.T) {
	src, cacheDir := t.TempDir(), t.TempDir()
	big := randomBytes(t, 24<<20+123)
	small := randomBytes(t, 200<<10)
	os.WriteFile(filepath.Join(src, "shard-0.tar"), big, 0o644)
	os.WriteFile(filepath.Join(src, "img.jpg"), small, 0o644)
	uri := "nas://" + src + "/"
	flags := []string{"--cache-dir", cacheDir, "--log-level", "debug"}

	check := func(m *cacheMount, name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(m.mnt, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s through the mount: %d bytes, %v; want the source's %d bytes", name, len(got), err, len(want))
		}
	}

	cold := startCacheMount(t, uri, flags...)
	check(cold, "shard-0.tar", big)
	check(cold, "img.jpg", small)
	st := cold.cacheStats()
	if st["backend_requests"] == 0 || st["daemon_reads"] == 0 {
		t.Fatalf("cold mount: %v; want reads served by the daemon from the backend", st)
	}

	warm := startCacheMount(t, uri, flags...)
	check(warm, "shard-0.tar", big)
	check(warm, "img.jpg", small)
	st = warm.cacheStats()
	if st["backend_requests"] != 0 {
		t.Fatalf("second mount fetched from the backend again: %v", st)
	}
	if st["passthrough_opens"] < 2 || st["daemon_reads"] != 0 {
		t.Fatalf("second mount: %v; want both files opened with passthrough and no read entering the daemon", st)
	}

	nopt := startCacheMount(t, uri, append(flags, "--no-passthrough")...)
	check(nopt, "shard-0.tar", big)
	st = nopt.cacheStats()
	if st["backend_requests"] != 0 || st["passthrough_opens"] != 0 || st["daemon_reads"] == 0 {
		t.Fatalf("--no-passthrough: %v; want reads served by the daemon from its disk cache", st)
	}

	// The object changes in the backend: never served stale.
	changed := randomBytes(t, len(small))
	os.WriteFile(filepath.Join(src, "img.jpg"), changed, 0o644)
	fresh := startCacheMount(t, uri, flags...)
	check(fresh, "img.jpg", changed)
	if st = fresh.cacheStats(); st["backend_requests"] == 0 {
		t.Fatalf("changed file: %v; want it fetched anew", st)
	}
}

// TestMountCacheFlagsRefuseBadSizes checks the size flags reject nonsense
// with a message naming the flag.
func TestMountCacheFlagsRefuseBadSizes(t *testing.T) {
	for _, args := range [][]string{
		{"mount", "--cache-memory", "lots", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--cache-disk", "-5GiB", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--prefetch-requests", "0", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--oss-retry-attempts", "-1", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--hdfs-retries", "-1", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--oss-part-size", "0", "--read-only", "nas:///tmp/", t.TempDir()},
		{"mount", "--upload-concurrency", "0", "nas:///tmp/", t.TempDir()},
		{"run", "--oss-upload-concurrency", "0", "--spec", "x.yaml"},
	} {
		code, _, stderr := runMlfsd(t, args...)
		if code == 0 || !strings.Contains(stderr, args[1]) || !strings.Contains(stderr, fmt.Sprintf("%q", args[2])) {
			t.Errorf("mlfsd %v: exit %d, stderr %q; want a failure naming %s and %q", args, code, stderr, args[1], args[2])
		}
	}
}

// TestMountCacheRestartAgainstOSSEmulator proves restart survival by the
// emulator's own request counters: a second daemon on the same cache dir
// reads every file without a single GET, and a changed object (new ETag) is
// fetched anew rather than served stale.
func TestMountCacheRestartAgainstOSSEmulator(t *testing.T) {
	root, cacheDir := t.TempDir(), t.TempDir()
	data := filepath.Join(root, "bkt", "train")
	os.MkdirAll(filepath.Join(data, "imgs"), 0o755)
	shard := randomBytes(t, 20<<20+5)
	os.WriteFile(filepath.Join(data, "shard-0.bin"), shard, 0o644)
	imgs := map[string][]byte{}
	for _, n := range []string{"a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg", "f.jpg"} {
		imgs[n] = randomBytes(t, 64<<10)
		os.WriteFile(filepath.Join(data, "imgs", n), imgs[n], 0o644)
	}
	srv, endpoint := ossemutest.Start(t, root, ossemu.Options{TTFB: 2 * time.Millisecond})

	uri := "oss://bkt/train/"
	flags := []string{"--cache-dir", cacheDir, "--oss-endpoint", endpoint}
	readAllFiles := func(m *cacheMount) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(m.mnt, "shard-0.bin"))
		if err != nil || !bytes.Equal(got, shard) {
			t.Fatalf("shard through the mount: %d bytes, %v", len(got), err)
		}
		for n, want := range imgs {
			got, err := os.ReadFile(filepath.Join(m.mnt, "imgs", n))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s through the mount: %d bytes, %v", n, len(got), err)
			}
		}
	}

	first := startCacheMount(t, uri, flags...)
	readAllFiles(first)
	first.cacheStats() // a clean stop lets queued disk writes land
	gets := srv.Stats()["GetObject"]
	if gets == 0 {
		t.Fatal("first mount read nothing from the emulator")
	}

	second := startCacheMount(t, uri, flags...)
	readAllFiles(second)
	st := second.cacheStats()
	if now := srv.Stats()["GetObject"]; now != gets {
		t.Fatalf("second mount on the same cache dir sent %d GETs to the emulator; want 0 (cache stats %v)", now-gets, st)
	}

	// Change one object in the store: its ETag changes, the cache must not
	// serve the old bytes.
	imgs["a.jpg"] = randomBytes(t, 64<<10)
	os.WriteFile(filepath.Join(data, "imgs", "a.jpg"), imgs["a.jpg"], 0o644)
	third := startCacheMount(t, uri, flags...)
	readAllFiles(third)
	third.cacheStats()
	if now := srv.Stats()["GetObject"]; now != gets+1 {
		t.Fatalf("after one object changed, a new mount sent %d GETs; want exactly 1 (the changed object)", now-gets)
	}
}
