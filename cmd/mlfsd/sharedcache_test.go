package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// sharedEmulator is an `mlfsd emulate oss` subprocess.
type sharedEmulator struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startSharedEmulator serves root with `mlfsd emulate oss` on a free port
// until the test ends (or kill).
func startSharedEmulator(t *testing.T, root string) *sharedEmulator {
	t.Helper()
	cmd := mlfsdCmd(t, "emulate", "oss", "--root", root, "--listen", "127.0.0.1:0")
	ossEnv(cmd)
	readyFile := withReadyFile(t, cmd)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &sharedEmulator{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(e.kill)
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		exited <- err
		close(e.done)
	}()
	e.addr = waitReady(t, readyFile, exited, stderr).Addr
	return e
}

// kill ends the emulator at once (SIGKILL), as a crashed store node.
func (e *sharedEmulator) kill() {
	e.cmd.Process.Kill()
	<-e.done
}

// sourceBytesOut reads the bytes the source emulator sent from its
// /_mlfsd/stats endpoint.
func sourceBytesOut(t *testing.T, endpoint string) int64 {
	t.Helper()
	resp, err := http.Get(endpoint + ossemu.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]int64
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s: %v", ossemu.StatsPath, err)
	}
	return st["bytes.out"]
}

// TestSharedCacheAcrossNodes: three daemons stand for three nodes, each
// with its own cache dir, reading one dataset from a source emulator
// through a shared tier on a second emulator (a subprocess). Node 1 reads
// it cold and fills the tier; node 2 reads it cold (its own cache empty)
// and costs the source at most 5% of the dataset; the tier is killed
// midway through node 3's read and every byte still arrives right.
func TestSharedCacheAcrossNodes(t *testing.T) {
	srcRoot, tierRoot := t.TempDir(), t.TempDir()
	data := filepath.Join(srcRoot, "bkt", "data")
	os.MkdirAll(filepath.Join(data, "imgs"), 0o755)
	os.Mkdir(filepath.Join(tierRoot, "tier"), 0o755)
	files := map[string][]byte{
		"shard-0.bin": randomBytes(t, 24<<20+7),
		"shard-1.bin": randomBytes(t, 3<<20+100),
	}
	for i := range 24 {
		files[fmt.Sprintf("imgs/%03d.jpg", i)] = randomBytes(t, 40<<10+i*1000)
	}
	var total int64
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(data, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += int64(len(b))
	}
	_, endpoint := startSignedOSS(t, srcRoot, ossemu.Options{TTFB: 2 * time.Millisecond})
	tier := startSharedEmulator(t, tierRoot)
	tierURI := "oss://tier." + tier.addr + "/mlfsd/"
	key := tierKeyFile(t) // one for every node: the cluster's

	startNode := func() (*nodeDaemon, string) {
		d := startNodeDaemon(t, t.TempDir(), "--oss-endpoint", endpoint, "--shared-cache", tierURI,
			"--shared-cache-timeout", "2s", "--shared-cache-key-file", key)
		mnt := t.TempDir()
		if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", mnt); code != 0 {
			t.Fatalf("mount: %s\ndaemon:\n%s", errOut, d.stderr)
		}
		return d, mnt
	}
	check := func(mnt, name string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Fatalf("%s through %s: %d bytes (want %d), %v", name, mnt, len(got), len(files[name]), err)
		}
	}
	readAll := func(mnt string) {
		t.Helper()
		for name := range files {
			check(mnt, name)
		}
	}
	metric := func(d *nodeDaemon, name string) float64 {
		t.Helper()
		v, ok := metricValue(t, d.scrape(t), name, map[string]string{"store": tierURI})
		if !ok {
			t.Fatalf("no %s{store=%q} in the scrape of a node with a shared cache", name, tierURI)
		}
		return v
	}

	// Node 1: cold everywhere. Its reads fill the tier behind it.
	n1, m1 := startNode()
	readAll(m1)
	first := sourceBytesOut(t, endpoint)
	if first < total {
		t.Fatalf("node 1 read a %d-byte dataset cold; the source sent %d", total, first)
	}
	if err := testwait.Until(testwait.Guard, func() bool { return metric(n1, sharedcache.MetricWriteBytes) >= float64(total) }); err != nil {
		t.Fatalf("node 1 wrote %v of %d bytes to the shared tier (dropped %v, errors %v)", metric(n1, sharedcache.MetricWriteBytes), total,
			metric(n1, sharedcache.MetricDropped), metric(n1, sharedcache.MetricWriteErrors))
	}

	// Node 2: its own cache is empty; the tier has every block.
	n2, m2 := startNode()
	readAll(m2)
	second := sourceBytesOut(t, endpoint) - first
	t.Logf("dataset %d bytes: node 1 cost the source %d, node 2 %d", total, first, second)
	if float64(second) > 0.05*float64(total) {
		t.Errorf("node 2 cost the source %d bytes of a %d-byte dataset that node 1 had read; want at most 5%%", second, total)
	}
	if hits := metric(n2, sharedcache.MetricHitBytes); hits < 0.95*float64(total) {
		t.Errorf("node 2 read %v bytes from the shared tier; want most of the %d-byte dataset", hits, total)
	}

	// Node 3: the tier dies halfway through the first shard.
	n3, m3 := startNode()
	f, err := os.Open(filepath.Join(m3, "shard-0.bin"))
	if err != nil {
		t.Fatal(err)
	}
	want := files["shard-0.bin"]
	got := make([]byte, 0, len(want))
	buf := make([]byte, 1<<20)
	killed := false
	for {
		if !killed && len(got) >= len(want)/2 {
			tier.kill()
			killed = true
		}
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading shard-0.bin through node 3 after %d bytes (tier killed: %v): %v", len(got), killed, err)
		}
	}
	f.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("shard-0.bin through node 3, tier killed midway: %d bytes, not the source's %d", len(got), len(want))
	}
	readAll(m3) // the rest, with the tier gone
	if fb := metric(n3, sharedcache.MetricFallbacks); fb == 0 {
		t.Errorf("node 3 read past a dead shared tier and counted no fallback")
	}
	for _, d := range []*nodeDaemon{n1, n2, n3} {
		d.stop(t)
	}
}

// tierKeyFile writes a shared cache key file and returns its path.
func tierKeyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tier.key")
	if err := os.WriteFile(p, []byte("cmd-test-tier-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedCacheFlagsRefuseBadValues: a bad --shared-cache or
// --shared-cache-size is refused, naming the flag, before anything is
// mounted.
func TestSharedCacheFlagsRefuseBadValues(t *testing.T) {
	src, mnt := t.TempDir(), t.TempDir()
	for _, c := range []struct{ flag, value, want string }{
		{"--shared-cache", "oss://cache/one-object", "directory URI"},
		{"--shared-cache", "gs://cache/x/", "gs"},
		{"--shared-cache-size", "lots", "--shared-cache-size"},
		{"--shared-cache-timeout", "0s", "--shared-cache-timeout"},
	} {
		code, _, stderr := runMlfsd(t, "mount", "--read-only", "--cache-dir", t.TempDir(), c.flag, c.value, "nas://"+src+"/", mnt)
		if code == 0 || !strings.Contains(stderr, c.flag) || !strings.Contains(stderr, c.want) {
			t.Errorf("%s %s: exit %d, stderr %q; want a failure naming %s and %q", c.flag, c.value, code, stderr, c.flag, c.want)
		}
		if isMounted(t, mnt) {
			t.Fatalf("%s mounted after %s %s was refused", mnt, c.flag, c.value)
		}
	}
}
