package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/node"
)

// The test binary doubles as the helper processes of
// TestFirstContactErrors: a process that holds a cache directory under the
// command line of a daemon, and a user who is not root asking for a mount.
const helperEnv = "MLFSD_API_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "hold-cache":
		os.Exit(holdCache(os.Getenv("MLFSD_API_TEST_DIR")))
	case "mount-not-root":
		os.Exit(mountNotRoot(os.Getenv("MLFSD_API_TEST_DIR")))
	}
	fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
	os.Exit(2)
}

// holdCache opens a cache on dir, says so, and holds it until stdin closes.
func holdCache(dir string) int {
	c, err := cache.New(cache.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer c.Close()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// mountNotRoot asks a node for an input mount of dir/data on dir/mnt and
// prints the error's message, then the cause under NeedRootError.
func mountNotRoot(dir string) int {
	s := node.Defaults()
	s.Cache.Dir = ""
	s.Output.StagingDir = filepath.Join(dir, "staging")
	n, err := node.New(context.Background(), node.Options{Settings: s})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer n.Close(context.Background())
	_, err = n.Mount(context.Background(), node.MountRequest{URI: "nas://" + dir + "/data/", Target: filepath.Join(dir, "mnt"), ReadOnly: true})
	var nr *mfs.NeedRootError
	if !errors.As(err, &nr) {
		fmt.Printf("%v\n(no NeedRootError)\n", err)
		return 1
	}
	fmt.Printf("%s\n%s\n", err, strings.TrimSpace(nr.Err.Error()))
	return 0
}

// TestFirstContactErrors: each first mistake of a new user (issue 32) gets
// a message that names the cause and the fix, asserted whole. Each case
// is the real thing: a port nobody listens on, a web server that is not
// OSS, a socket path with no daemon and one a daemon left, a process that
// holds the cache directory, a daemon without OSS credentials, a mount
// asked for by uid 65534.
func TestFirstContactErrors(t *testing.T) {
	// The daemon (this process) has no OSS credentials of its own.
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	t.Setenv("OSS_SESSION_TOKEN", "")
	t.Setenv("OSS_ENDPOINT", "")
	c, _ := startServer(t)
	keys := &node.Credentials{OSSAccessKeyID: "id", OSSAccessKeySecret: "secret"}
	mountErr := func(t *testing.T, uri string, creds *node.Credentials, opts map[string]string) error {
		t.Helper()
		req := node.MountRequest{URI: uri, Target: t.TempDir(), ReadOnly: true, Options: opts}
		if creds != nil {
			req.Credentials = *creds
		}
		info, err := c.Mount(t.Context(), req)
		if err == nil {
			c.Unmount(t.Context(), info.Target)
			t.Fatalf("mount of %s succeeded", uri)
		}
		return err
	}

	cases := []struct {
		name string
		// run returns the error and the message it must have.
		run func(t *testing.T) (error, string)
	}{
		{"connection refused", func(t *testing.T) (error, string) {
			ep := closedPort(t)
			err := mountErr(t, "oss://bucket/p/", keys, map[string]string{"oss-endpoint": ep, "oss-connect-timeout": "1s"})
			return err, "open oss://bucket/p/: OSS endpoint " + ep + " refused the connection: nothing listens there; " +
				"check the endpoint (--oss-endpoint, OSS_ENDPOINT or the URI) and that the server is up"
		}},
		{"not OSS", func(t *testing.T) (error, string) {
			web := httptest.NewServer(http.NotFoundHandler())
			t.Cleanup(web.Close)
			err := mountErr(t, "oss://bucket/p/", keys, map[string]string{"oss-endpoint": web.URL})
			return err, "open oss://bucket/p/: OSS endpoint " + web.URL + " does not speak OSS: it answered a bucket listing with something the OSS client cannot read " +
				"(oss: service returned invalid response body, status = 404 Not Found, RequestId = ); check the endpoint (--oss-endpoint, OSS_ENDPOINT or the URI)"
		}},
		{"daemon= mount without credentials", func(t *testing.T) (error, string) {
			err := mountErr(t, "oss://bucket/p/", nil, map[string]string{"oss-endpoint": closedPort(t)})
			return err, "open oss://bucket/p/: no OSS credentials: the mount request brought none of its own (mount -t fuse.mlfsd -o daemon= sends none), so it uses the daemon's, and the daemon has none: " +
				"start the daemon with --oss-credentials-file FILE or with OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET in its environment, " +
				"or mount with `mlfsd mount --daemon SOCKET`, which sends those of its own environment"
		}},
		{"no daemon socket", func(t *testing.T) (error, string) {
			sock := filepath.Join(t.TempDir(), "api.sock")
			_, err := NewClient(sock).Status(t.Context())
			return err, "no daemon at " + sock + ": start it with `mlfsd daemon --socket " + sock + " --state-dir DIR` (as root), or pass --daemon with the socket of the daemon that runs"
		}},
		{"socket left by a dead daemon", func(t *testing.T) (error, string) {
			sock := filepath.Join(t.TempDir(), "api.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
			_, err = NewClient(sock).Status(t.Context())
			return err, "no daemon answers at " + sock + " (the socket is left from a daemon that exited): start it with `mlfsd daemon --socket " + sock + " --state-dir DIR` (as root), or pass --daemon with the socket of the daemon that runs"
		}},
		{"second daemon on one cache directory", func(t *testing.T) (error, string) {
			dir := t.TempDir()
			pid := holdCacheAsDaemon(t, dir)
			s := node.Defaults()
			s.Cache.Dir = dir
			s.Output.StagingDir = t.TempDir()
			n, err := node.New(t.Context(), node.Options{Settings: s, OpenCache: true})
			if err == nil {
				n.Close(context.Background())
			}
			return err, fmt.Sprintf("read cache: a daemon (pid %d) already serves this cache directory (%s): "+
				"mount through it (`mlfsd mount --daemon SOCKET`, daemon=SOCKET in mount -o), or give this one another --cache-dir", pid, dir)
		}},
		{"not root", func(t *testing.T) (error, string) {
			msg, cause := mountAsNobody(t)
			return errors.New(msg), "mount nas://" + "DIR" + "/data/ on DIR/mnt: FUSE mounts need root: run mlfsd as root (e.g. with sudo), or as a user that fusermount3 may mount for " +
				"(package fuse3 installed, /dev/fuse readable and writable by you); as uid 65534: " + cause
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err, want := tc.run(t)
			if err == nil {
				t.Fatalf("no error; want %q", want)
			}
			if got := err.Error(); got != want {
				t.Errorf("message:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// closedPort is the URL of a loopback port nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// holdCacheAsDaemon starts a process whose command line is `mlfsd daemon`
// (this test binary) holding the cache directory dir; it returns its pid
// once it holds it, and ends it with the test.
func holdCacheAsDaemon(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Args = []string{"mlfsd", "daemon"}
	cmd.Env = append(os.Environ(), helperEnv+"=hold-cache", "MLFSD_API_TEST_DIR="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("cache holder: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// mountAsNobody runs a mount as uid 65534 (this test binary, copied where
// that user may run it) on a mountpoint it may not write: neither the
// direct mount nor fusermount3 can mount it. It returns the message, with
// the temp dir replaced by DIR, and the fallback's own error.
func mountAsNobody(t *testing.T) (msg, cause string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"data", "mnt", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "staging"), 0o777); err != nil {
		t.Fatal(err)
	}
	// An empty input is refused before any mounting; this one holds a file.
	if err := os.WriteFile(filepath.Join(dir, "data", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin", "api.test")
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=mount-not-root", "MLFSD_API_TEST_DIR="+dir, "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	// Only stdout carries the messages: fusermount3, when installed, says
	// why it refused on the helper's stderr.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if err != nil || len(lines) != 2 {
		t.Fatalf("mount as uid 65534: %v\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	return strings.ReplaceAll(lines[0], dir, "DIR"), strings.ReplaceAll(lines[1], dir, "DIR")
}
