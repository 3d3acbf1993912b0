package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/fs/fstest"
	"github.com/mlfsd/mlfsd/handover"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// forkNodeDaemon forks a process now that becomes `mlfsd daemon` (with
// startNodeDaemon's flags) only when the returned function is called,
// which waits until it is ready. A process forked after the test opened
// an output file would close its copy of the descriptor at exec, which
// FUSE sees as a close(2) of the file (FLUSH): a version of the file
// half-written would be sealed and uploaded. Forked first, it holds none.
func forkNodeDaemon(t *testing.T, dir string, extra ...string) func() *nodeDaemon {
	t.Helper()
	d := &nodeDaemon{socket: filepath.Join(dir, "api.sock"), stateDir: filepath.Join(dir, "state"),
		stderr: &syncBuffer{}, done: make(chan error, 1)}
	args := append([]string{"daemon", "--state-dir", d.stateDir, "--socket", d.socket,
		"--cache-dir", filepath.Join(dir, "cache"), "--staging-dir", filepath.Join(dir, "staging"),
		"--cache-memory", "64MiB", "--cache-free-floor", "0", "--metrics-listen", "127.0.0.1:0",
		"--nas-root", testNASRoot(t),
		// These tests stop daemons to clean up: unmount then.
		"--on-stop=unmount"}, extra...)
	m := mlfsdCmd(t, args...)
	d.ready = withReadyFile(t, m)
	d.cmd = exec.Command("/bin/sh", append([]string{"-c", `read go && exec "$0" "$@"`}, m.Args...)...)
	d.cmd.Env = m.Env
	ossEnv(d.cmd)
	d.cmd.Stderr = d.stderr
	start, err := d.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		detachUnder(t, filepath.Dir(dir))
	})
	return func() *nodeDaemon {
		t.Helper()
		if _, err := start.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		d.waitReady(t)
		return d
	}
}

// waitObject waits until the store holds want at path.
func waitObject(t *testing.T, path string, want []byte, d *nodeDaemon) {
	t.Helper()
	testwait.EventuallyNoError(t, func() error {
		got, err := os.ReadFile(path)
		if err == nil && !bytes.Equal(got, want) {
			err = fmt.Errorf("%d bytes of %d", len(got), len(want))
		}
		return err
	}, "%s to arrive whole in the store; daemon:\n%s", path, d.stderr)
}

// writeAt writes p at off through f.
func writeAt(t *testing.T, f *os.File, p []byte, off int64) {
	t.Helper()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatalf("write %s at %d: %v", f.Name(), off, err)
	}
}

// ino is the inode number of path (stat) or of an open file (fstat).
func ino(t *testing.T, path string, f *os.File) uint64 {
	t.Helper()
	var st syscall.Stat_t
	var err error
	if f != nil {
		err = syscall.Fstat(int(f.Fd()), &st)
	} else {
		err = syscall.Stat(path, &st)
	}
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// dropCaches has the kernel let go of every unused dentry and inode: it
// sends the daemons FORGET for the nodes no one holds.
func dropCaches(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2\n"), 0o200); err != nil {
		t.Fatalf("drop_caches: %v", err)
	}
}

// TestDaemonTakeoverOutputs: a new daemon takes over an input and two
// output mounts (one written by FUSE passthrough, one through the daemon)
// while a reader and two writers are mid-file and uploads queued before
// the switch are still pending. Nothing is published before its close;
// after the switch the reader and writers go on through the same fds with
// no error, each output arrives whole, the pending uploads complete. Then
// the kernel forgets every node it does not hold (drop_caches): the new
// daemon, which took the lookup counts over, applies those FORGETs with no
// error, keeps the nodes still held under the same inode numbers, and
// hands everything over once more.
func TestDaemonTakeoverOutputs(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data", "many"), 0o755)
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	os.MkdirAll(filepath.Join(root, "bkt", "out2"), 0o755)
	big := randomBytes(t, 8<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	for i := range 50 {
		os.WriteFile(filepath.Join(root, "bkt", "data", "many", fmt.Sprintf("f%02d", i)), []byte(fmt.Sprint(i)), 0o644)
	}
	// 2 MiB/s a connection: uploads of closed files are still queued at
	// the switch (one at a time, --upload-concurrency 1).
	_, endpoint := startSignedOSS(t, root, ossemu.Options{ConnBandwidth: 2 << 20})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in, out, out2 := t.TempDir(), t.TempDir(), t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--upload-concurrency", "1", "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--output-passthrough=false", "oss://bkt/out2/", out2); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	// Nodes the kernel looks up and lets go of after the switch.
	if ents, err := os.ReadDir(filepath.Join(in, "many")); err != nil || len(ents) != 50 {
		t.Fatalf("listing: %d entries, %v", len(ents), err)
	}
	manyIno := map[string]uint64{}
	// An O_PATH descriptor holds a node in the kernel (no OPEN is sent):
	// memory pressure, or another test's drop_caches, must not make the
	// kernel forget one before the switch (f08 was renumbered once, with
	// another run of these tests alongside). Closed before the FORGETs
	// below.
	var many []string
	for i := range 50 {
		many = append(many, fmt.Sprintf("f%02d", i))
	}
	release := fstest.HoldNodes(t, filepath.Join(in, "many"), many)
	for _, name := range many {
		p := filepath.Join(in, "many", name)
		manyIno[p] = ino(t, p, nil)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	r, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readAtCheck(t, r, big[:3<<20], 0)
	rIno := ino(t, "", r)

	// Writers mid-file, one per output mount.
	ckpt := randomBytes(t, 6<<20)
	ckpt2 := randomBytes(t, 3<<20)
	w, err := os.Create(filepath.Join(out, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeAt(t, w, ckpt[:2<<20], 0)
	w2, err := os.OpenFile(filepath.Join(out2, "sub", "ckpt.bin"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if !os.IsNotExist(err) {
		t.Fatalf("open in a missing directory: %v", err)
	}
	if err := os.Mkdir(filepath.Join(out2, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	w2, err = os.OpenFile(filepath.Join(out2, "sub", "ckpt.bin"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	writeAt(t, w2, ckpt2[:1<<20], 0)
	wIno := ino(t, "", w)
	// Another descriptor of the passthrough file, closed: that close seals
	// a version of what is written so far, in the very staging file the
	// kernel goes on writing (in place: the Store must keep it across the
	// handover).
	if f, err := os.OpenFile(filepath.Join(out, "ckpt.bin"), os.O_RDONLY, 0); err != nil {
		t.Fatal(err)
	} else if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Files closed before the switch: their uploads are queued.
	pending := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("p%d.bin", i)
		pending[name] = randomBytes(t, 2<<20)
		if err := os.WriteFile(filepath.Join(out, name), pending[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}

	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	if p, ok := switchPause(d.stderr.String(), d2.stderr.String()); ok {
		t.Logf("requests paused for %v (old daemon froze → new daemon served)", p)
	}
	// Some of the closed files were still queued: the new daemon took the
	// queue over from the journal.
	if !strings.Contains(d2.stderr.String(), "writeback: resuming uploads left by a previous run") {
		t.Errorf("no upload was pending at the switch (the test lost its point):\n%s", d2.stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "bkt", "out2", "sub", "ckpt.bin")); !os.IsNotExist(err) {
		t.Fatalf("sub/ckpt.bin is in the store before its close (%v)", err)
	}
	// The same fds, through the new daemon.
	readAtCheck(t, r, big[3<<20:], 3<<20)
	writeAt(t, w, ckpt[2<<20:], 2<<20)
	writeAt(t, w2, ckpt2[1<<20:], 1<<20)
	readAtCheck(t, w2, ckpt2, 0) // reads of a file being written see its bytes
	if st, err := w.Stat(); err != nil || st.Size() != int64(len(ckpt)) {
		t.Fatalf("size of the file written across the takeover: %v, %v; new daemon:\n%s", st.Size(), err, d2.stderr)
	}
	// The nodes the kernel knows keep their numbers across the switch.
	for p, want := range manyIno {
		if got := ino(t, p, nil); got != want {
			t.Fatalf("%s is inode %d after the takeover, was %d", p, got, want)
		}
	}
	// The kernel forgets what it does not hold; what it holds stays. An
	// input tree numbers a path anew once the kernel forgot it, so a new
	// number shows the FORGET reached the tree (it is not pinned).
	release()
	dropCaches(t)
	renumbered := 0
	for i := range 50 {
		p := filepath.Join(in, "many", fmt.Sprintf("f%02d", i))
		if got, err := os.ReadFile(p); err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("%s after the FORGETs: %q, %v", p, got, err)
		}
		if ino(t, p, nil) != manyIno[p] {
			renumbered++
		}
	}
	t.Logf("%d of 50 files looked up before the takeover were forgotten after it", renumbered)
	if renumbered == 0 {
		t.Errorf("no file looked up before the takeover was forgotten after the kernel let go of it")
	}
	if got := ino(t, filepath.Join(in, "big.bin"), nil); got != rIno {
		t.Errorf("big.bin, held open, is inode %d after the FORGETs, was %d", got, rIno)
	}
	if got := ino(t, filepath.Join(out, "ckpt.bin"), nil); got != wIno {
		t.Errorf("ckpt.bin, held open, is inode %d after the FORGETs, was %d", got, wIno)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close of the file written across the takeover: %v", err)
	}
	if err := w2.Close(); err != nil {
		t.Fatalf("close of the file written across the takeover: %v", err)
	}
	waitObject(t, filepath.Join(root, "bkt", "out", "ckpt.bin"), ckpt, d2)
	waitObject(t, filepath.Join(root, "bkt", "out2", "sub", "ckpt.bin"), ckpt2, d2)
	for name, data := range pending {
		waitObject(t, filepath.Join(root, "bkt", "out", name), data, d2)
	}
	if st, err := os.Stat(filepath.Join(out2, "sub")); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("the directory made before the takeover: %v, %v", st, err)
	}
	// New files after the switch, and a second takeover with the outputs.
	if err := os.WriteFile(filepath.Join(out, "after.txt"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	takeover = forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")
	w3, err := os.Create(filepath.Join(out, "w3.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	writeAt(t, w3, []byte("first "), 0)
	d3 := takeover()
	if err := d2.waitExit(t); err != nil {
		t.Fatalf("second daemon after the second takeover: %v; stderr:\n%s", err, d2.stderr)
	}
	writeAt(t, w3, []byte("second"), 6)
	if err := w3.Close(); err != nil {
		t.Fatal(err)
	}
	dropCaches(t)
	if got, err := os.ReadFile(filepath.Join(out, "after.txt")); err != nil || string(got) != "after" {
		t.Errorf("after.txt after the second takeover: %q, %v", got, err)
	}
	readAtCheck(t, r, big[:1<<20], 0)
	r.Close()
	d3.stop(t) // drains the outputs
	for name, want := range map[string]string{"after.txt": "after", "w3.bin": "first second"} {
		if got, err := os.ReadFile(filepath.Join(root, "bkt", "out", name)); err != nil || string(got) != want {
			t.Errorf("%s in the store: %q, %v", name, got, err)
		}
	}
	for _, m := range []string{in, out, out2} {
		if isMounted(t, m) {
			t.Errorf("%s still mounted after the last daemon stopped", m)
		}
	}
	for _, dd := range []*nodeDaemon{d, d2, d3} {
		if s := dd.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, `"level":"ERROR"`) {
			t.Errorf("a daemon logged an error:\n%s", s)
		}
	}
}

// forkFailingTakeover forks a process now that becomes `mlfsd daemon
// --takeover` with args only when the returned function is called (see
// forkNodeDaemon), which waits for it to exit and returns its exit code
// and stderr.
func forkFailingTakeover(t *testing.T, d *nodeDaemon, dir string, extra ...string) func() (int, string) {
	t.Helper()
	args := append([]string{"daemon", "--state-dir", d.stateDir, "--socket", d.socket,
		"--cache-dir", filepath.Join(dir, "cache"), "--staging-dir", filepath.Join(dir, "staging"),
		"--cache-memory", "64MiB", "--cache-free-floor", "0", "--nas-root", testNASRoot(t), "--takeover"}, extra...)
	return forkCmd(t, mlfsdCmd(t, args...))
}

// forkCmd forks a process now that execs m only when the returned
// function is called, which waits for it to exit and returns its exit
// code and stderr.
func forkCmd(t *testing.T, m *exec.Cmd) func() (int, string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read go && exec "$0" "$@"`}, m.Args...)...)
	cmd.Env = m.Env
	ossEnv(cmd)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return func() (int, string) {
		t.Helper()
		if _, err := start.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			done <- err
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), stderr.String()
			}
			if err != nil {
				t.Fatal(err)
			}
			return 0, stderr.String()
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s did not exit; stderr:\n%s", m.Args[0], stderr.String())
			return 0, ""
		}
	}
}

// A new daemon killed mid-handover: with MLFSD_TEST_DYING_TAKEOVER set to
// a handover socket, the test binary speaks the protocol as a new daemon
// would, says it is ready for the mounts offered, reads the old daemon's
// "committed", and exits at once: it dies before its acknowledgement.
func init() {
	if sock := os.Getenv("MLFSD_TEST_DYING_TAKEOVER"); sock != "" {
		if err := dyingTakeover(sock); err != nil {
			fmt.Fprintln(os.Stderr, "dying takeover:", err)
			os.Exit(1)
		}
		os.Exit(3)
	}
}

func dyingTakeover(sock string) error {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	send := func(m map[string]any) error {
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
		return err
	}
	recv := func() (map[string]any, error) {
		var hdr [4]byte
		oob := make([]byte, unix.CmsgSpace(4*64))
		// The offer's fds come with its first byte: take them, close them.
		n, oobn, _, _, err := c.ReadMsgUnix(hdr[:1], oob)
		if err != nil || n != 1 {
			return nil, fmt.Errorf("reading: %v", err)
		}
		if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cms {
				fds, _ := unix.ParseUnixRights(&cm)
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
		if _, err := io.ReadFull(c, hdr[1:]); err != nil {
			return nil, err
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return nil, err
		}
		var m map[string]any
		return m, json.Unmarshal(body, &m)
	}
	if err := send(map[string]any{"type": "hello", "protocol": handover.Protocol, "version": "dying"}); err != nil {
		return err
	}
	if m, err := recv(); err != nil || m["type"] != "offer" {
		return fmt.Errorf("offer: %v, %v", m["type"], err)
	}
	if err := send(map[string]any{"type": "prepared"}); err != nil {
		return err
	}
	if m, err := recv(); err != nil || m["type"] != "committed" {
		return fmt.Errorf("committed: %v, %v", m["type"], err)
	}
	return nil // exits without its ack
}

// TestDaemonTakeoverFailureKeepsOutputs: takeovers that fail leave the old
// daemon serving its input and output mounts: a new binary that speaks
// another handover protocol (refused at once), one that cannot set the
// mounts up (its store endpoint is dead: it fails after the old daemon
// froze its mounts and described its staged files), and one killed after
// it said it was ready, before it took the mounts. Each exits non-zero
// saying why, the old daemon says the handover failed; a reader and a
// writer mid-file go on through the same fds, the file arrives whole in
// the store; nothing is unmounted, and a later takeover works.
func TestDaemonTakeoverFailureKeepsOutputs(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	big := randomBytes(t, 4<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	_, endpoint := startSignedOSS(t, root, ossemu.Options{})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in, out := t.TempDir(), t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	oldProtocol := forkFailingTakeover(t, d, dir, "--oss-endpoint", endpoint, "--handover-protocol", "3")
	noStore := forkFailingTakeover(t, d, dir, "--oss-endpoint", dead, "--oss-retry-attempts", "1")
	dyingCmd := mlfsdCmd(t)
	dyingCmd.Env = append(dyingCmd.Env, "MLFSD_TEST_DYING_TAKEOVER="+filepath.Join(d.stateDir, "takeover.sock"))
	dying := forkCmd(t, dyingCmd)
	later := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover")

	r, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readAtCheck(t, r, big[:1<<20], 0)
	ckpt := randomBytes(t, 4<<20)
	w, err := os.Create(filepath.Join(out, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeAt(t, w, ckpt[:1<<20], 0)

	failures := 0
	for _, c := range []struct {
		name, why string
		run       func() (int, string)
	}{
		{"another handover protocol", "protocol", oldProtocol},
		{"a dead store endpoint", "takeover", noStore},
		{"a new daemon killed before it took the mounts", "", dying},
	} {
		code, errOut := c.run()
		if c.why == "" && code != 3 {
			t.Fatalf("the dying takeover did not get as far as the commit (exit %d):\n%s", code, errOut)
		}
		if code == 0 {
			t.Fatalf("a takeover with %s succeeded; stderr:\n%s", c.name, errOut)
		}
		if !strings.Contains(errOut, c.why) {
			t.Errorf("the takeover with %s does not say why:\n%s", c.name, errOut)
		}
		t.Logf("the new daemon with %s said:\n%s", c.name, errOut)
		failures++
		// The old daemon may learn of the failure after the new one exits.
		refusals := func() int { return strings.Count(d.stderr.String(), "handover failed; this daemon goes on serving") }
		if err := testwait.Until(testwait.Guard, func() bool { return refusals() >= failures }); err != nil || refusals() != failures {
			t.Fatalf("the old daemon said the handover failed %d times, want %d:\n%s", refusals(), failures, d.stderr)
		}
		select {
		case err := <-d.done:
			t.Fatalf("the old daemon exited after a failed takeover: %v; stderr:\n%s", err, d.stderr)
		default:
		}
		// The old daemon serves on, the same fds and new files.
		off := int64(failures) << 20
		readAtCheck(t, r, big[off:off+1<<20], off)
		writeAt(t, w, ckpt[failures<<20:(failures+1)<<20], int64(failures<<20))
	}
	if !strings.Contains(d.stderr.String(), "the new daemon died before it took the mounts") {
		t.Errorf("the old daemon does not say the new one died mid-handover:\n%s", d.stderr)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close of the file written across the failed takeovers: %v", err)
	}
	waitObject(t, filepath.Join(root, "bkt", "out", "ckpt.bin"), ckpt, d)
	if err := os.WriteFile(filepath.Join(out, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitObject(t, filepath.Join(root, "bkt", "out", "new.txt"), []byte("new"), d)
	for _, m := range []string{in, out} {
		if !isMounted(t, m) {
			t.Fatalf("%s was unmounted by a failed takeover", m)
		}
	}
	// And it can still be taken over.
	d2 := later()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	readAtCheck(t, r, big[3<<20:], 3<<20)
	if got, err := os.ReadFile(filepath.Join(out, "ckpt.bin")); err != nil || !bytes.Equal(got, ckpt) {
		t.Errorf("ckpt.bin through the new daemon: %d bytes, %v", len(got), err)
	}
	r.Close()
	d2.stop(t)
	for _, m := range []string{in, out} {
		if isMounted(t, m) {
			t.Errorf("%s still mounted after the new daemon stopped", m)
		}
	}
}

// TestDaemonTakeoverNASOutput: an output on a NAS directory (a store with
// directories, modes and links) handed over with its tree as the job left
// it: a directory made and one renamed, a symbolic link, a FIFO (which no
// store holds: it lives in the mount only), modes and owners changed, a
// file renamed while open for writing; all of it is the same after the
// switch, the writer goes on, and what reaches the NAS is whole.
func TestDaemonTakeoverNASOutput(t *testing.T) {
	nasDir := t.TempDir()
	dir := t.TempDir()
	d := startNodeDaemon(t, dir)
	out := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "nas://"+nasDir+"/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	takeover := forkNodeDaemon(t, dir, "--takeover")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(out, "a", "b"), 0o755))
	must(os.Rename(filepath.Join(out, "a"), filepath.Join(out, "run")))
	must(os.Symlink("b/ckpt.bin", filepath.Join(out, "run", "latest")))
	must(syscall.Mkfifo(filepath.Join(out, "run", "fifo"), 0o600))
	must(os.WriteFile(filepath.Join(out, "run", "b", "done.txt"), []byte("done"), 0o644))
	must(os.Chmod(filepath.Join(out, "run", "b", "done.txt"), 0o600))
	data := randomBytes(t, 3<<20)
	w, err := os.Create(filepath.Join(out, "run", "b", "ckpt.tmp"))
	must(err)
	defer w.Close()
	writeAt(t, w, data[:1<<20], 0)
	must(os.Rename(filepath.Join(out, "run", "b", "ckpt.tmp"), filepath.Join(out, "run", "b", "ckpt.bin")))
	before := map[string]uint64{}
	for _, p := range []string{"run", "run/b", "run/latest", "run/fifo", "run/b/done.txt", "run/b/ckpt.bin"} {
		var st syscall.Stat_t
		must(syscall.Lstat(filepath.Join(out, p), &st))
		before[p] = st.Ino
	}

	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	for p, want := range before {
		var st syscall.Stat_t
		must(syscall.Lstat(filepath.Join(out, p), &st))
		if st.Ino != want {
			t.Errorf("%s is inode %d after the takeover, was %d", p, st.Ino, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "run", "latest")); err != nil || target != "b/ckpt.bin" {
		t.Errorf("link after the takeover: %q, %v", target, err)
	}
	if st, err := os.Lstat(filepath.Join(out, "run", "fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("FIFO after the takeover: %v, %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(out, "run", "b", "done.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode after the takeover: %v, %v", st, err)
	}
	writeAt(t, w, data[1<<20:], 1<<20)
	must(w.Close())
	if got, err := os.ReadFile(filepath.Join(out, "run", "latest")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("reading the file through the link: %d bytes, %v", len(got), err)
	}
	d2.stop(t) // drains
	if got, err := os.ReadFile(filepath.Join(nasDir, "run", "b", "ckpt.bin")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("ckpt.bin on the NAS: %d bytes, %v", len(got), err)
	}
	if got, err := os.ReadFile(filepath.Join(nasDir, "run", "b", "done.txt")); err != nil || string(got) != "done" {
		t.Errorf("done.txt on the NAS: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(nasDir, "run", "b", "ckpt.tmp")); !os.IsNotExist(err) {
		t.Errorf("the name renamed away is on the NAS: %v", err)
	}
}

// TestDaemonTakeoverProtocol1: a takeover in handover protocol 1 (what a
// daemon of before output handovers speaks: no lookup counts) still takes
// input mounts over; their nodes are pinned, so the kernel's FORGETs after
// it are not acted on (the paths keep their numbers) and cause no error.
// An output mount cannot go in protocol 1: the takeover is refused.
func TestDaemonTakeoverProtocol1(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	big := randomBytes(t, 2<<20)
	os.WriteFile(filepath.Join(root, "bkt", "data", "big.bin"), big, 0o644)
	for i := range 10 {
		os.WriteFile(filepath.Join(root, "bkt", "data", fmt.Sprintf("f%d", i)), []byte(fmt.Sprint(i)), 0o644)
	}
	_, endpoint := startSignedOSS(t, root, ossemu.Options{})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in, out := t.TempDir(), t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	refused := forkFailingTakeover(t, d, dir, "--oss-endpoint", endpoint, "--handover-protocol", "1")
	if code, errOut := refused(); code == 0 || !strings.Contains(errOut, "output mount") {
		t.Fatalf("a protocol 1 takeover of an output mount: exit %d:\n%s", code, errOut)
	}
	if code, _, errOut := d.client(t, "umount", "--daemon", d.socket, out); code != 0 {
		t.Fatalf("umount output: %s", errOut)
	}
	inos := map[string]uint64{}
	for i := range 10 {
		p := filepath.Join(in, fmt.Sprintf("f%d", i))
		inos[p] = ino(t, p, nil)
	}
	takeover := forkNodeDaemon(t, dir, "--oss-endpoint", endpoint, "--takeover", "--handover-protocol", "1")
	r, err := os.Open(filepath.Join(in, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readAtCheck(t, r, big[:1<<20], 0)
	d2 := takeover()
	if err := d.waitExit(t); err != nil {
		t.Fatalf("old daemon after the takeover: %v; stderr:\n%s", err, d.stderr)
	}
	readAtCheck(t, r, big[1<<20:], 1<<20)
	dropCaches(t)
	for p, want := range inos {
		if got := ino(t, p, nil); got != want {
			t.Errorf("%s, pinned, is inode %d after the FORGETs, was %d", p, got, want)
		}
	}
	r.Close()
	d2.stop(t)
	if s := d2.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, `"level":"ERROR"`) {
		t.Errorf("the new daemon logged an error:\n%s", s)
	}
}
