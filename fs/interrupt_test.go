package fs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// statHelperEnv makes the test binary a helper process: it prints the
// thread it will stat from, then stats the path in the variable with the
// raw system call (os.Stat would retry an EINTR) and reports the result.
const statHelperEnv = "MLFSD_TEST_RAW_STAT"

func TestMain(m *testing.M) {
	if p := os.Getenv(statHelperEnv); p != "" {
		runtime.LockOSThread()
		signal.Notify(make(chan os.Signal, 1), syscall.SIGUSR1) // handled, not fatal
		fmt.Println(unix.Gettid())
		var st unix.Stat_t
		fmt.Println(unix.Stat(p, &st))
		os.Exit(0)
	}
	if p := os.Getenv(forkedWriterEnv); p != "" {
		forkedWriter(p)
	}
	os.Exit(m.Run())
}

// heldList holds each List of the backend, and each Stat but the mount's
// own (of the root), until its context ends or release is closed, and
// reports on ended how it finished (nil: released). A lookup waits on one
// of them: the listing, or the store's answer for that one name.
type heldList struct {
	backends.Backend
	entered chan struct{}
	release chan struct{}
	ended   chan error
}

func newHeldList(b backends.Backend) *heldList {
	return &heldList{Backend: b, entered: make(chan struct{}, 8), release: make(chan struct{}), ended: make(chan error, 8)}
}

func (h *heldList) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	if err := h.hold(ctx); err != nil {
		return backends.ListPage{}, err
	}
	return h.Backend.List(ctx, opt)
}

func (h *heldList) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	if key != "" {
		if err := h.hold(ctx); err != nil {
			return backends.ObjectInfo{}, err
		}
	}
	return h.Backend.Stat(ctx, key)
}

func (h *heldList) hold(ctx context.Context) error {
	h.entered <- struct{}{}
	select {
	case <-ctx.Done():
		h.ended <- ctx.Err()
		return ctx.Err()
	case <-h.release:
		h.ended <- nil
		return nil
	}
}

// heldMount mounts a directory holding file "a" over a heldList backend;
// the first lookup in it waits on the store, held.
func heldMount(t *testing.T) (mnt string, h *heldList) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	h = newHeldList(newNAS(t, src))
	mnt = t.TempDir()
	srv, err := mfs.MountInput(mnt, h, mfs.InputOptions{}, mfs.MountOptions{})
	if err != nil {
		t.Fatalf("FUSE mount failed (tests need /dev/fuse and root): %v", err)
	}
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return mnt, h
}

func waitEntered(t *testing.T, h *heldList) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(testwait.Guard):
		t.Fatal("the lookup never reached the store")
	}
}

// waitCanceled waits for the held store call to end by its context.
func waitCanceled(t *testing.T, h *heldList, never string) {
	t.Helper()
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the store call ended with %v, want its context canceled", err)
		}
	case <-time.After(testwait.Guard):
		t.Fatal(never)
	}
}

// TestSignalledCallerIsNotInterrupted: signals that do not kill the caller
// (Go's SIGURG preemption, a handled SIGUSR1) reach a thread blocked in a
// lookup that waits on the store. The kernel sends an INTERRUPT for each;
// the store call must carry on and the raw stat(2) succeed, not fail EINTR.
func TestSignalledCallerIsNotInterrupted(t *testing.T) {
	mnt, h := heldMount(t)
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	tids, errs := make(chan int, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with the goroutine: no signal outlives it
		tids <- unix.Gettid()
		var st unix.Stat_t
		errs <- unix.Stat(filepath.Join(mnt, "a"), &st)
	}()
	tid := <-tids
	waitEntered(t, h)
	for i := 0; i < 20; i++ {
		sig := syscall.SIGUSR1
		if i%2 == 1 {
			sig = syscall.SIGURG
		}
		if err := unix.Tgkill(os.Getpid(), tid, sig); err == unix.ESRCH {
			break // the stat returned, and its thread is gone
		} else if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-h.ended:
		t.Errorf("the store call ended before it was released: %v", err)
	default:
	}
	close(h.release)
	if err := <-errs; err != nil {
		t.Fatalf("stat through the mount with signals arriving: %v, want success", err)
	}
	select { // delivered once the thread left the kernel
	case <-sigs:
	case <-time.After(testwait.Guard):
		t.Error("no SIGUSR1 was delivered: the test did not signal the blocked thread")
	}
}

// TestKilledCallerCancels: a caller killed while its lookup waits on the
// store must not wait it out: the kernel holds a killed process until the
// request is answered, so the store call's context must end. Also when a
// handled signal came first and its interrupt was let pass: the kernel
// sends no second INTERRUPT for the kill.
func TestKilledCallerCancels(t *testing.T) {
	for _, signalFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("signalled-first=%v", signalFirst), func(t *testing.T) {
			mnt, h := heldMount(t)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), statHelperEnv+"="+filepath.Join(mnt, "a"))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("helper: %v", err)
			}
			tid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatalf("helper said %q: %v", line, err)
			}
			waitEntered(t, h)
			if signalFirst {
				for i := 0; i < 5; i++ {
					if err := unix.Tgkill(cmd.Process.Pid, tid, syscall.SIGUSR1); err != nil {
						t.Fatal(err)
					}
					time.Sleep(10 * time.Millisecond)
				}
				select {
				case err := <-h.ended:
					t.Fatalf("a handled signal ended the store call: %v", err)
				case <-time.After(200 * time.Millisecond):
				}
			}
			start := time.Now()
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			waitCanceled(t, h, "the killed caller's store call was never canceled")
			cmd.Wait()
			t.Logf("canceled %v after the kill", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestAbortedConnectionCancels: when the connection goes (here aborted
// through fusectl, as `umount -f` or a dead daemon's successor would), the
// kernel fails the callers at once, and what they waited on must end too.
func TestAbortedConnectionCancels(t *testing.T) {
	const ctl = "/sys/fs/fuse/connections"
	if m, ok, err := mountinfo.Lookup(ctl); err != nil {
		t.Fatal(err)
	} else if !ok || m.FSType != "fusectl" {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			t.Fatalf("mount fusectl on %s: %v", ctl, err)
		}
		t.Cleanup(func() { unix.Unmount(ctl, 0) })
	}
	mnt, h := heldMount(t)
	m, ok, err := mountinfo.Lookup(mnt)
	if err != nil || !ok {
		t.Fatalf("%s is not in the mount table (%v)", mnt, err)
	}
	_, minor, _ := strings.Cut(m.Dev, ":")

	errs := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		errs <- unix.Stat(filepath.Join(mnt, "a"), &st)
	}()
	waitEntered(t, h)
	if err := os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0o200); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
		t.Errorf("stat on the aborted connection: %v, want ENOTCONN", err)
	}
	waitCanceled(t, h, "the store call outlived its connection")
}
