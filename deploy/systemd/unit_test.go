// Package systemd holds mlfsd's systemd unit. Its test runs the unit's own
// command lines (ExecStart, ExecReload, with the unit's flags) as
// processes under an emulated service manager: $NOTIFY_SOCKET is a real
// unix datagram socket read as systemd reads it (READY=1, MAINPID=,
// BARRIER=1, FDSTORE=1/FDNAME=/FDSTOREREMOVE=1, fds passed with
// SCM_RIGHTS), and a restart passes the stored fds back as systemd does
// ($LISTEN_FDS, $LISTEN_FDNAMES, $LISTEN_PID).
package systemd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// bin is the mlfsd binary TestMain builds once.
var bin string

func TestMain(m *testing.M) {
	if os.Getenv(ioHelperEnv) != "" {
		os.Exit(ioHelper())
	}
	dir, err := os.MkdirTemp("", "mlfsd-systemd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "mlfsd")
	build := exec.Command("go", "build", "-o", bin, "github.com/mlfsd/mlfsd/cmd/mlfsd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building mlfsd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// unit is what the test takes from mlfsd.service.
type unit struct {
	daemonArgs string   // MLFSD_DAEMON_ARGS
	execStart  []string // words, $MLFSD_DAEMON_ARGS not expanded
	execReload []string
	service    map[string]string // other [Service] settings, last wins
}

func parseUnit(t *testing.T) unit {
	t.Helper()
	data, err := os.ReadFile("mlfsd.service")
	if err != nil {
		t.Fatal(err)
	}
	u := unit{service: map[string]string{}}
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("mlfsd.service: %q is not KEY=VALUE", line)
		}
		switch k {
		case "Environment":
			words := splitWords(t, v)
			for _, w := range words {
				if name, val, _ := strings.Cut(w, "="); name == "MLFSD_DAEMON_ARGS" {
					u.daemonArgs = val
				}
			}
		case "ExecStart":
			u.execStart = splitWords(t, v)
		case "ExecReload":
			u.execReload = splitWords(t, v)
		default:
			u.service[k] = v
		}
	}
	if u.daemonArgs == "" || u.execStart == nil || u.execReload == nil {
		t.Fatalf("mlfsd.service: no MLFSD_DAEMON_ARGS, ExecStart or ExecReload")
	}
	return u
}

// splitWords splits a unit's command line or assignment list as systemd
// does: on blanks, with single and double quotes.
func splitWords(t *testing.T, s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// manager emulates systemd for one service: its notify socket, its fd
// store, its main process.
type manager struct {
	t      *testing.T
	sock   string
	conn   *net.UnixConn
	env    []string
	logDir string

	mu      sync.Mutex
	store   []storedFd // in the order stored
	ready   int        // READY=1 seen
	mainPID int
	states  []string
}

type storedFd struct {
	name string
	fd   int
}

func newManager(t *testing.T, dir string, env []string) *manager {
	m := &manager{t: t, sock: filepath.Join(dir, "notify.sock"), env: env, logDir: dir}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: m.sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	m.conn = c
	done := make(chan struct{})
	go m.serve(done)
	t.Cleanup(func() {
		c.Close()
		<-done
		m.mu.Lock()
		for _, s := range m.store {
			unix.Close(s.fd)
		}
		m.mu.Unlock()
	})
	return m
}

// serve reads notifications as systemd does, in order.
func (m *manager) serve(done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*256))
	for {
		n, oobn, _, _, err := m.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		var fds []int
		if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cms {
				if got, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, got...)
				}
			}
		}
		kv := map[string]string{}
		for line := range strings.SplitSeq(string(buf[:n]), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				kv[k] = v
			}
		}
		m.mu.Lock()
		m.states = append(m.states, string(buf[:n]))
		switch {
		case kv["BARRIER"] == "1":
			// Everything before it is processed: close the pipe.
		case kv["FDSTORE"] == "1":
			for _, fd := range fds {
				m.store = append(m.store, storedFd{name: kv["FDNAME"], fd: fd})
			}
			fds = nil
		case kv["FDSTOREREMOVE"] == "1":
			kept := m.store[:0]
			for _, s := range m.store {
				if s.name == kv["FDNAME"] {
					unix.Close(s.fd)
					continue
				}
				kept = append(kept, s)
			}
			m.store = kept
		}
		if kv["READY"] == "1" {
			m.ready++
		}
		if p, err := strconv.Atoi(kv["MAINPID"]); err == nil {
			m.mainPID = p
		}
		m.mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func (m *manager) readyCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ready
}

func (m *manager) main() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mainPID
}

func (m *manager) storeNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for _, s := range m.store {
		names = append(names, s.name)
	}
	return names
}

// start runs ExecStart as systemd does: the fd store's fds from fd 3 on,
// named by $LISTEN_FDNAMES, and $LISTEN_PID the service's own pid (set by
// the shell that execs it, keeping its pid). It returns once the daemon
// said READY=1.
func (m *manager) start(argv []string, n int) *exec.Cmd {
	m.t.Helper()
	m.mu.Lock()
	var files []*os.File
	var names []string
	for _, s := range m.store {
		files = append(files, os.NewFile(uintptr(s.fd), s.name))
		names = append(names, s.name)
	}
	readyBefore := m.ready
	m.mu.Unlock()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`}, argv...)...)
	cmd.Env = append(append([]string{}, m.env...), "NOTIFY_SOCKET="+m.sock,
		"LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+strings.Join(names, ":"))
	cmd.ExtraFiles = files
	log, err := os.Create(filepath.Join(m.logDir, fmt.Sprintf("daemon-%d.log", n)))
	if err != nil {
		m.t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	m.mainPID = cmd.Process.Pid
	m.mu.Unlock()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	m.t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	testwait.Eventually(m.t, func() bool {
		select {
		case <-exited:
			m.t.Fatalf("daemon %d exited before READY=1:\n%s", n, m.log(n))
		default:
		}
		return m.readyCount() > readyBefore
	}, "READY=1 from daemon %d", n)
	// The Wait above owns the process: waitExit polls its pid.
	return cmd
}

func (m *manager) log(n int) string {
	b, _ := os.ReadFile(filepath.Join(m.logDir, fmt.Sprintf("daemon-%d.log", n)))
	return string(b)
}

// stop is systemd's stop of the main process: SIGTERM, then wait for it.
func (m *manager) stop(what string) {
	m.t.Helper()
	pid := m.main()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		m.t.Fatalf("pidfd of the main process %d: %v", pid, err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		m.t.Fatal(err)
	}
	waitPidfd(m.t, pidfd, what)
}

func waitPidfd(t *testing.T, pidfd int, what string) {
	t.Helper()
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, int((5 * time.Minute).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("%s: the process did not exit (%v)", what, err)
		}
		return
	}
}

// TestUnitRestartAndReloadKeepMounts runs the unit's ExecStart, makes
// three mounts (two inputs, one output) with a reader on the inputs and a
// writer on the output, then upgrades twice as systemd would: `systemctl
// restart` (SIGTERM, then ExecStart again with the fd store) and
// `systemctl reload` (ExecReload). A file opened before the upgrades is
// read after both; no read or write fails; every file written reaches the
// bucket.
func TestUnitRestartAndReloadKeepMounts(t *testing.T) {
	u := parseUnit(t)
	if max, _ := strconv.Atoi(u.service["FileDescriptorStoreMax"]); max < 64 {
		t.Fatalf("mlfsd.service: FileDescriptorStoreMax=%q: the fd store must hold a /dev/fuse fd per mount", u.service["FileDescriptorStoreMax"])
	}
	root := t.TempDir()
	_, endpoint, bucketRoot := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	// The inputs: two prefixes of files whose content names them.
	var inputs []string
	for _, p := range []string{"in1", "in2"} {
		for i := range 16 {
			key := fmt.Sprintf("%s/f%02d", p, i)
			path := filepath.Join(bucketRoot, "bkt", key)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, content(key), 0o644); err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, key)
		}
	}
	// The unit's paths, under the test's dir; the metrics port any free
	// one; the emulator's endpoint and a small cache (an administrator's
	// edit of MLFSD_DAEMON_ARGS).
	// The unit names the shipped config file (deploy/systemd/config.yaml,
	// installed as /etc/mlfsd/config.yaml): the test's copy gets the same
	// edits.
	local := func(text string) string {
		for _, p := range []string{"/var/lib/mlfsd", "/run/mlfsd", "/var/cache/mlfsd"} {
			text = strings.ReplaceAll(text, p, filepath.Join(root, strings.ReplaceAll(p[1:], "/", "-")))
		}
		return strings.ReplaceAll(text, "127.0.0.1:9469", "127.0.0.1:0")
	}
	args := local(u.daemonArgs)
	const shippedConfig = "/etc/mlfsd/config.yaml"
	config := ""
	if strings.Contains(args, shippedConfig) {
		b, err := os.ReadFile("config.yaml")
		if err != nil {
			t.Fatal(err)
		}
		config = local(string(b))
		path := filepath.Join(root, "config.yaml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = strings.ReplaceAll(args, shippedConfig, path)
	}
	args += " --oss-endpoint " + endpoint + " --cache-memory 64MiB --cache-free-floor 0"
	for _, p := range []string{"run-mlfsd", "var-lib-mlfsd", "var-cache-mlfsd"} {
		if err := os.MkdirAll(filepath.Join(root, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	socket := settingOf(t, args, config, "socket")
	creds := []string{"OSS_ACCESS_KEY_ID=" + ossemutest.AccessKeyID, "OSS_ACCESS_KEY_SECRET=" + ossemutest.AccessKeySecret}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "MLFSD_DAEMON_ARGS=" + args,
		"FDSTORE=" + u.service["FileDescriptorStoreMax"]}, creds...)
	sd := newManager(t, root, env)
	t.Cleanup(func() {
		if t.Failed() {
			for i := 1; i <= 3; i++ {
				t.Logf("daemon %d:\n%s", i, sd.log(i))
			}
		}
	})
	execStart := expand(u.execStart, args)
	if execStart[0] != "/usr/local/bin/mlfsd" {
		t.Fatalf("ExecStart runs %s, want /usr/local/bin/mlfsd", execStart[0])
	}
	execStart[0] = bin

	mnt := filepath.Join(root, "mnt")
	targets := map[string]string{"in1": filepath.Join(mnt, "in1"), "in2": filepath.Join(mnt, "in2"), "out": filepath.Join(mnt, "out")}
	t.Cleanup(func() {
		for _, d := range targets {
			unix.Unmount(d, unix.MNT_DETACH)
		}
		sd.mu.Lock()
		pid := sd.mainPID
		sd.mu.Unlock()
		if pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	})
	sd.start(execStart, 1)
	client := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, creds...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mlfsd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, name := range []string{"in1", "in2", "out"} {
		if err := os.MkdirAll(targets[name], 0o755); err != nil {
			t.Fatal(err)
		}
		mount := []string{"mount", "--daemon", socket}
		if name != "out" {
			mount = append(mount, "--read-only")
		}
		client(append(mount, "oss://bkt/"+name+"/", targets[name])...)
	}
	// The reader and the writer run in a process of their own: this one
	// starts daemons, and a fork's close-on-exec of a FUSE file flushes
	// it, which waits for the mount's daemon (the one being started).
	io := exec.Command(os.Args[0])
	io.Env = append(os.Environ(), ioHelperEnv+"=1", "IO_IN1="+targets["in1"], "IO_IN2="+targets["in2"], "IO_OUT="+targets["out"])
	stdin, err := io.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := io.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	io.Stderr = os.Stderr
	if err := io.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { io.Process.Kill(); io.Wait() })
	var reads, writes atomic.Int64
	var mu sync.Mutex
	var written, ioErrs []string
	ioDone := make(chan struct{})
	go func() {
		defer close(ioDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "r":
				reads.Add(1)
			case "w":
				mu.Lock()
				written = append(written, rest)
				mu.Unlock()
				writes.Add(1)
			default:
				mu.Lock()
				ioErrs = append(ioErrs, sc.Text())
				mu.Unlock()
			}
		}
	}()
	progress := func(what string) {
		t.Helper()
		r, w := reads.Load(), writes.Load()
		testwait.Eventually(t, func() bool { return reads.Load() > r+20 && writes.Load() > w+5 }, "reads and writes going on %s", what)
	}
	progress("before the upgrades")

	// systemctl restart: stop (SIGTERM), then start with the fd store.
	sd.stop("systemctl restart: the old daemon")
	if names := sd.storeNames(); len(names) != 4 {
		t.Fatalf("the fd store after the stop holds %q, want three /dev/fuse fds and the handover state", names)
	}
	sd.start(execStart, 2)
	if names := sd.storeNames(); len(names) != 0 {
		t.Errorf("the fd store still holds %q once the new daemon serves", names)
	}
	progress("after systemctl restart")

	// systemctl reload: ExecReload, whose daemon says MAINPID=.
	oldPID := sd.main()
	oldPidfd, err := unix.PidfdOpen(oldPID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(oldPidfd)
	reload := expand(u.execReload, args)
	for i := range reload {
		reload[i] = strings.ReplaceAll(reload[i], "/usr/local/bin/mlfsd", bin)
	}
	rl := exec.Command(reload[0], reload[1:]...)
	rl.Env = append(append([]string{}, env...), "NOTIFY_SOCKET="+sd.sock)
	reloadLog, err := os.Create(filepath.Join(root, "daemon-3.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer reloadLog.Close()
	rl.Stdout, rl.Stderr = reloadLog, reloadLog
	if err := rl.Run(); err != nil {
		t.Fatalf("ExecReload: %v", err)
	}
	testwait.Eventually(t, func() bool { return sd.main() != oldPID }, "MAINPID= from the daemon ExecReload started")
	waitPidfd(t, oldPidfd, "systemctl reload: the old daemon")
	progress("after systemctl reload")

	// Stop the reader and the writer: the helper checks the files it held
	// open since before both upgrades, and exits.
	stdin.Close()
	<-ioDone
	if err := io.Wait(); err != nil {
		t.Errorf("the reader and writer: %v", err)
	}
	for _, e := range ioErrs {
		t.Error(e)
	}
	// Only an explicit umount unmounts: it drains the output first.
	for _, name := range []string{"out", "in1", "in2"} {
		client("umount", "--daemon", socket, targets[name])
	}
	for _, name := range written {
		got, err := os.ReadFile(filepath.Join(bucketRoot, "bkt", "out", name))
		if err != nil || !bytes.Equal(got, content("out/"+name)) {
			t.Errorf("out/%s in the bucket: %d bytes, %v", name, len(got), err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(bucketRoot, "bkt", "out", "held")); string(got) != "before the upgrades\nafter the upgrades\n" {
		t.Errorf("out/held in the bucket: %q, %v", got, err)
	}
	t.Logf("%d reads and %d files written across a restart and a reload", reads.Load(), len(written))
	if len(written) == 0 || reads.Load() == 0 {
		t.Error("nothing read or written")
	}
	sd.stop("systemctl stop")
}

// expand is systemd's $VAR expansion of MLFSD_DAEMON_ARGS in a command
// line: unbraced, split into words; inside a shell's script, left to the
// shell (which has it in its environment).
func expand(argv []string, args string) []string {
	var out []string
	for _, a := range argv {
		if a == "$MLFSD_DAEMON_ARGS" {
			out = append(out, strings.Fields(args)...)
			continue
		}
		out = append(out, a)
	}
	return out
}

// settingOf is the daemon's setting name: its flag in args, else its key
// in the config file's text.
func settingOf(t *testing.T, args, config, name string) string {
	f := strings.Fields(args)
	for i, a := range f {
		if a == "--"+name && i+1 < len(f) {
			return f[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	for _, line := range strings.Split(config, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("neither MLFSD_DAEMON_ARGS nor the config file sets %s", name)
	return ""
}

// ioHelperEnv runs the test binary as the reader and writer of the mounts
// (IO_IN1, IO_IN2, IO_OUT): a line on stdout per file read ("r") and per
// file written and closed ("w NAME"), any other line an error. It stops
// when stdin closes, then checks the files it held open since it started.
const ioHelperEnv = "MLFSD_UNIT_TEST_IO"

func ioHelper() int {
	in := map[string]string{"in1": os.Getenv("IO_IN1"), "in2": os.Getenv("IO_IN2")}
	out := os.Getenv("IO_OUT")
	var lines sync.Mutex
	say := func(format string, args ...any) {
		lines.Lock()
		fmt.Printf(format+"\n", args...)
		lines.Unlock()
	}
	held, err := os.Open(filepath.Join(in["in1"], "f00"))
	if err != nil {
		say("e %v", err)
		return 1
	}
	heldOut, err := os.Create(filepath.Join(out, "held"))
	if err == nil {
		_, err = heldOut.Write([]byte("before the upgrades\n"))
	}
	if err != nil {
		say("e %v", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { bufio.NewReader(os.Stdin).ReadString(0); cancel() }()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("in%d/f%02d", 1+i%2, (i/2)%16)
			p, f, _ := strings.Cut(key, "/")
			got, err := os.ReadFile(filepath.Join(in[p], f))
			switch {
			case err != nil:
				say("e %v", err)
			case !bytes.Equal(got, content(key)):
				say("e %s: read %d bytes, not its content", key, len(got))
			default:
				say("r")
			}
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("w%04d", i)
			f, err := os.Create(filepath.Join(out, name))
			if err != nil {
				say("e %v", err)
				continue
			}
			data := content("out/" + name)
			ok := true
			for part := range 4 {
				if _, err := f.Write(data[part*len(data)/4 : (part+1)*len(data)/4]); err != nil {
					say("e %s: %v", name, err)
					ok = false
				}
			}
			if err := f.Close(); err != nil {
				say("e %s: %v", name, err)
			} else if ok {
				say("w %s", name)
			}
		}
	})
	wg.Wait()
	buf := make([]byte, 64<<10)
	if n, err := held.ReadAt(buf, 0); (err != nil && n != len(buf)) || !bytes.Equal(buf[:n], content("in1/f00")) {
		say("e the input file opened before the upgrades: %d bytes, %v", n, err)
	}
	held.Close()
	if _, err := heldOut.Write([]byte("after the upgrades\n")); err != nil {
		say("e the output file opened before the upgrades: %v", err)
	}
	if err := heldOut.Close(); err != nil {
		say("e closing the output file opened before the upgrades: %v", err)
	}
	return 0
}

// content is what the file of key holds, 64 KiB that name it.
func content(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return bytes.Repeat(sum[:], 2048)
}
