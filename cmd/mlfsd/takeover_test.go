package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
)

// waitExit waits for a daemon to exit and returns its error.
func (d *nodeDaemon) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("mlfsd daemon did not exit; stderr:\n%s", d.stderr)
		return nil
	}
}

// readAt reads len(want) bytes at off from f and compares them.
func readAtCheck(t *testing.T, f *os.File, want []byte, off int64) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil && err != io.EOF {
		t.Fatalf("read %s at %d: %v", f.Name(), off, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s at %d: wrong bytes", f.Name(), off)
	}
}

// switchPause is the time from the old daemon's freeze to the new one
// serving, from their logs' timestamps (a figure to report, not to test).
func switchPause(oldLog, newLog string) (time.Duration, bool) {
	stamp := func(log, msg string) (time.Time, bool) {
		for _, line := range strings.Split(log, "\n") {
			var rec struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
				return rec.Time, true
			}
		}
		return time.Time{}, false
	}
	from, ok1 := stamp(oldLog, "handover: mounts frozen and offered")
	to, ok2 := stamp(newLog, "serving a mount taken over")
	return to.Sub(from), ok1 && ok2
}

// passthroughBytes is what the daemon's only mount handed to the kernel
// for passthrough so far.
func passthroughBytes(t *testing.T, d *nodeDaemon) int64 {
	t.Helper()
	code, out, errOut := d.client(t, "status", "--daemon", d.socket, "--json")
	var st []node.MountStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 {
		t.Fatalf("status: %s %s", out, errOut)
	}
	return st[0].CacheHitBytes["passthrough"]
}

// openByPassthrough opens name once the cache holds it whole on disk, so
// that the kernel reads it by passthrough (the disk tier is written behind
// the reads that filled it: until then opens are served by the daemon).
// The mount's page cache of name is dropped before each open: a reopen of
// a file the kernel still holds stays in cached mode.
func openByPassthrough(t *testing.T, d *nodeDaemon, name string) *os.File {
	t.Helper()
	var opened *os.File
	testwait.Eventually(t, func() bool {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		before := passthroughBytes(t, d)
		f, err = os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		if passthroughBytes(t, d) > before {
			opened = f
			return true
		}
		f.Close()
		return false
	}, "%s to be opened by passthrough; daemon:\n%s", name, d.stderr)
	return opened
}

// TestDaemonTakeoverKeepsOpenFiles: a second `mlfsd daemon --takeover`
// takes the running daemon's input mount while a reader holds a file open
// mid-way; the reader goes on through the same fd with the right bytes,
// the old daemon exits 0 without unmounting, and the new one serves new
// opens, listings and the API, hands over again to a third, which
// unmounts on SIGTERM.
func TestDaemonTakeoverKeepsOpenFiles(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data", "sub"), 0o755)
	big := randomBytes(t, 8<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "bkt", "data", "sub", "small.txt"), []byte("small"), 0o644)
	ptData := randomBytes(t, 2<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "pt.bin"), ptData, 0o644)
	emu, endpoint := startSignedOSS(t, root, ossemu.Options{})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	f, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	readAtCheck(t, f, big[:3<<20], 0)
	// A directory handle held open across the takeover as well.
	dh, err := os.Open(filepath.Join(in, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Close()
	// And a file the kernel reads by passthrough: read whole once (now
	// complete in the cache), then opened again.
	if got, err := os.ReadFile(filepath.Join(in, "pt.bin")); err != nil || !bytes.Equal(got, ptData) {
		t.Fatalf("first read of pt.bin: %d bytes, %v", len(got), err)
	}
	pt := openByPassthrough(t, d, filepath.Join(in, "pt.bin"))
	defer pt.Close()

	lists := emu.Stats()["ListObjectsV2"]
	d2 := startNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	// The listings come with the handover: the new daemon only checks the
	// channel exists (one listing of at most one key).
	if n := emu.Stats()["ListObjectsV2"] - lists; n > 1 {
		t.Errorf("the takeover listed the store %d times; want at most 1 (the listings are handed over)", n)
	}
	if !strings.Contains(d.stderr.String(), "handed the mounts over") {
		t.Errorf("old daemon did not log the handover:\n%s", d.stderr)
	}
	if !strings.Contains(d2.stderr.String(), "took over mount") {
		t.Errorf("new daemon did not log the takeover:\n%s", d2.stderr)
	}
	if p, ok := switchPause(d.stderr.String(), d2.stderr.String()); ok {
		t.Logf("requests paused for %v (old daemon froze → new daemon served)", p)
	}
	// Same fds, after the old process is gone.
	readAtCheck(t, pt, ptData, 0)
	readAtCheck(t, f, big[3<<20:], 3<<20)
	readAtCheck(t, f, big[:1<<20], 0)
	names, err := dh.Readdirnames(-1)
	if err != nil || len(names) != 1 || names[0] != "small.txt" {
		t.Errorf("listing through the directory handle held across the takeover: %v, %v", names, err)
	}
	if got, err := os.ReadFile(filepath.Join(in, "sub", "small.txt")); err != nil || string(got) != "small" {
		t.Errorf("new open after the takeover: %q, %v", got, err)
	}
	var ms []node.MountInfo
	code, lst, errOut := d2.client(t, "status", "--daemon", d2.socket, "--json")
	// The mount table names the mount for a restart after a crash.
	if data, err := os.ReadFile(filepath.Join(d2.stateDir, "mounts.json")); err != nil || !strings.Contains(string(data), in) {
		t.Errorf("mount table after the takeover: %s, %v", data, err)
	}
	if code != 0 || json.Unmarshal([]byte(lst), &ms) != nil || len(ms) != 1 || ms[0].Target != in {
		t.Fatalf("status of the new daemon: %s %s", lst, errOut)
	}
	// A daemon that took over hands over again (its handles and pinned
	// nodes included).
	d3 := startNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	if err := d2.waitExit(t); err != nil {
		t.Fatalf("second daemon after the second takeover: %v; stderr:\n%s", err, d2.stderr)
	}
	readAtCheck(t, f, big[5<<20:], 5<<20)
	readAtCheck(t, pt, ptData[1<<20:], 1<<20)
	if got, err := os.ReadFile(filepath.Join(in, "sub", "small.txt")); err != nil || string(got) != "small" {
		t.Errorf("open after the second takeover: %q, %v", got, err)
	}
	// A new open of the passthrough file beside the handed-over one (the
	// kernel refuses mixing passthrough and daemon-served opens of one
	// inode, so the new daemon must know which the old one was).
	if got, err := os.ReadFile(filepath.Join(in, "pt.bin")); err != nil || !bytes.Equal(got, ptData) {
		t.Errorf("new open of pt.bin after the takeovers: %d bytes, %v", len(got), err)
	}
	pt.Close()
	f.Close()
	dh.Close()
	d3.stop(t)
	if isMounted(t, in) {
		t.Errorf("%s still mounted after the new daemon stopped", in)
	}
}

// TestDaemonTakeoverUnderLoad: 8 readers stream their own files from a
// slow store (256 KiB/s a connection: reads wait on the store, so some are
// in flight at the switch) and 4 writers write theirs through the daemon
// (no passthrough: their writes are requests in flight too) while a new
// daemon takes the mounts over; every reader gets every byte right, no
// reader or writer sees an error, every written file arrives whole.
func TestDaemonTakeoverUnderLoad(t *testing.T) {
	const readers, size, chunk = 8, 8 << 20, 256 << 10
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	files := make([][]byte, readers)
	for i := range files {
		files[i] = randomBytes(t, size)
		os.WriteFile(filepath.Join(root, "bkt", "data", fmt.Sprintf("f%d.bin", i)), files[i], 0o644)
	}
	const writers, wchunk, wafter = 4, 4 << 10, 64
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	_, endpoint := startSignedOSS(t, root, ossemu.Options{TTFB: 20 * time.Millisecond, ConnBandwidth: 256 << 10})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in, out := t.TempDir(), t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--output-passthrough=false", "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	var started sync.WaitGroup
	started.Add(readers + writers)
	errs := make(chan error, readers+writers)
	progress := make([]atomic.Int64, readers)
	// Each writer appends small chunks at a steady pace (a load, not a
	// timing: a ticker paces it) until the switch, then wafter more.
	written := make([]bytes.Buffer, writers)
	switched := make(chan struct{})
	for i := 0; i < writers; i++ {
		go func() {
			f, err := os.Create(filepath.Join(out, fmt.Sprintf("w%d.bin", i)))
			started.Done()
			if err != nil {
				errs <- err
				return
			}
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			after := 0
			for off := int64(0); after < wafter; off += wchunk {
				select {
				case <-switched:
					after++
				default:
				}
				p := make([]byte, wchunk)
				for j := range p {
					p[j] = byte(i*31 + int(off>>12)*7 + j)
				}
				if _, err := f.WriteAt(p, off); err != nil {
					f.Close()
					errs <- fmt.Errorf("writer %d at %d: %w", i, off, err)
					return
				}
				written[i].Write(p)
				<-tick.C
			}
			errs <- f.Close()
		}()
	}
	for i := 0; i < readers; i++ {
		go func() {
			f, err := os.Open(filepath.Join(in, fmt.Sprintf("f%d.bin", i)))
			started.Done()
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			buf := make([]byte, chunk)
			for off := 0; off < size; off += chunk {
				n, err := f.ReadAt(buf, int64(off))
				if err != nil && err != io.EOF {
					errs <- fmt.Errorf("reader %d at %d: %w", i, off, err)
					return
				}
				if !bytes.Equal(buf[:n], files[i][off:off+n]) {
					errs <- fmt.Errorf("reader %d at %d: wrong bytes", i, off)
					return
				}
				progress[i].Store(int64(off + n))
			}
			errs <- nil
		}()
	}
	// Every file is open (its handle must survive); the reads run on.
	started.Wait()
	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	close(switched)
	var atSwitch []int64
	for i := range progress {
		atSwitch = append(atSwitch, progress[i].Load())
	}
	for i := 0; i < readers+writers; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("readers stuck after the takeover; new daemon:\n%s", d2.stderr)
		}
	}
	t.Logf("bytes read by each reader when the old daemon had exited: %v (of %d)", atSwitch, size)
	if strings.Contains(d2.stderr.String(), "FUSE_NOTIFY_RESEND") {
		t.Errorf("the kernel refused the resend of the requests in flight:\n%s", d2.stderr)
	}
	d2.stop(t) // drains the output
	for i := range written {
		t.Logf("writer %d wrote %d bytes across the switch", i, written[i].Len())
		if got, err := os.ReadFile(filepath.Join(root, "bkt", "out", fmt.Sprintf("w%d.bin", i))); err != nil || !bytes.Equal(got, written[i].Bytes()) {
			t.Errorf("w%d.bin in the store: %d bytes of %d, %v", i, len(got), written[i].Len(), err)
		}
	}
}

// TestDaemonTakeoverFailureKeepsOldServing: a new daemon that cannot take
// the mounts (its store endpoint is wrong, so it cannot set the mount up)
// exits with the reason; the old daemon thaws and goes on serving the same
// open file and new opens, and a later takeover still works.
func TestDaemonTakeoverFailureKeepsOldServing(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	big := randomBytes(t, 4<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "bkt", "data", "a.txt"), []byte("aaa"), 0o644)
	_, endpoint := startSignedOSS(t, root, ossemu.Options{})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	f, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	readAtCheck(t, f, big[:1<<20], 0)

	// A port nothing listens on: the new daemon cannot reach the store.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	code, _, errOut := d.client(t, "daemon", "--state-dir", d.stateDir, "--socket", d.socket,
		"--cache-dir", filepath.Join(dir, "cache"), "--staging-dir", filepath.Join(dir, "staging"),
		"--cache-memory", "64MiB", "--cache-free-floor", "0", "--oss-endpoint", dead, "--oss-retry-attempts", "1", "--takeover")
	if code == 0 {
		t.Fatalf("a takeover that cannot reach the store succeeded; stderr:\n%s", errOut)
	}
	t.Logf("the new daemon said:\n%s", errOut)
	if !strings.Contains(errOut, "takeover") {
		t.Errorf("the failed takeover does not say why:\n%s", errOut)
	}
	if !strings.Contains(d.stderr.String(), "handover failed; this daemon goes on serving") {
		t.Errorf("the old daemon does not say the handover failed:\n%s", d.stderr)
	}
	select {
	case err := <-d.done:
		t.Fatalf("the old daemon exited after a failed takeover: %v; stderr:\n%s", err, d.stderr)
	default:
	}
	// The old daemon serves on: the same fd, new opens, its API.
	readAtCheck(t, f, big[1<<20:], 1<<20)
	if got, err := os.ReadFile(filepath.Join(in, "a.txt")); err != nil || string(got) != "aaa" {
		t.Errorf("new open after the failed takeover: %q, %v", got, err)
	}
	if code, _, errOut := d.client(t, "status", "--daemon", d.socket); code != 0 {
		t.Errorf("status after the failed takeover: %s", errOut)
	}
	// And it can still be taken over.
	d2 := startNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	readAtCheck(t, f, big[:1<<20], 0)
	f.Close()
	d2.stop(t)
	if isMounted(t, in) {
		t.Errorf("%s still mounted after the new daemon stopped", in)
	}
}
