package fuseconn

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel sends FUSE_INTERRUPT for any signal that reaches a thread
// blocked in a request, and go-fuse then cancels the request's context,
// which our handlers answer with EINTR. Most such signals are not the end
// of the caller: Go's runtime preempts goroutines with SIGURG, git and
// progress bars tick with SIGALRM, a shell or a data loader handles
// SIGCHLD, and each expects the call to carry on (SA_RESTART). An EINTR
// out of stat(2) or open(2) fails code that never expected one; gcsfuse
// met it with Go programs and git (jacobsa/fuse#122, gcsfuse#562) and now
// ignores interrupts by default. Ignoring them all would have a killed
// process wait out a slow listing or upload, since the kernel will not let
// it go until the request is answered. So a request's context ends only
// when its caller is dying (the kernel marks every fatal signal by making
// SIGKILL pending on each thread of the group) or the connection is gone;
// other interrupts are noted, and the caller is looked at again on every
// tick until the request ends, as no second interrupt will come.

// interruptTick is how often interrupted requests are looked at: the delay
// before a killed caller's request is cancelled.
const interruptTick = 20 * time.Millisecond

// interruptIdleTicks is how many ticks without a request in flight the
// watcher waits before it stops.
const interruptIdleTicks = 50

// interrupts filters the cancellation of one mount's requests.
type interrupts struct {
	// conn is the /dev/fuse fd the server reads, or -1 where go-fuse holds
	// it (a fusermount mount): then a dead connection is not seen, and
	// interrupted requests run to their end.
	conn atomic.Int32

	mu       sync.Mutex
	inflight map[*call]struct{} // GUARDED_BY(mu)
	watching bool               // GUARDED_BY(mu)
}

// call is one request in flight.
type call struct {
	kernel <-chan struct{} // closed by go-fuse on an interrupt or a dead connection
	cancel chan struct{}   // what the handler sees
	tid    uint32          // the caller's thread, in the connection's pid namespace; 0: not known

	interrupted bool // GUARDED_BY(interrupts.mu)
	cancelled   bool // GUARDED_BY(interrupts.mu)
}

func newInterrupts() *interrupts {
	in := &interrupts{inflight: map[*call]struct{}{}}
	in.conn.Store(-1)
	return in
}

// setConn names the fd the server reads.
func (in *interrupts) setConn(fd int) { in.conn.Store(int32(fd)) }

// begin registers a request whose go-fuse cancel channel is kernel, from
// thread tid, and returns the channel its handler is to see.
func (in *interrupts) begin(kernel <-chan struct{}, tid uint32) *call {
	c := &call{kernel: kernel, cancel: make(chan struct{}), tid: tid}
	in.mu.Lock()
	in.inflight[c] = struct{}{}
	if !in.watching {
		in.watching = true
		go in.watch()
	}
	in.mu.Unlock()
	return c
}

// end unregisters c.
func (in *interrupts) end(c *call) {
	in.mu.Lock()
	delete(in.inflight, c)
	in.mu.Unlock()
}

func (in *interrupts) watch() {
	t := time.NewTicker(interruptTick)
	defer t.Stop()
	idle := 0
	var check []*call
	for range t.C {
		in.mu.Lock()
		if len(in.inflight) == 0 {
			if idle++; idle >= interruptIdleTicks {
				in.watching = false
				in.mu.Unlock()
				return
			}
			in.mu.Unlock()
			continue
		}
		idle = 0
		check = check[:0]
		for c := range in.inflight {
			if c.cancelled {
				continue
			}
			if !c.interrupted {
				select {
				case <-c.kernel:
					c.interrupted = true
				default:
					continue
				}
			}
			check = append(check, c)
		}
		in.mu.Unlock()
		if len(check) == 0 {
			continue
		}
		dead := connDead(int(in.conn.Load()))
		for _, c := range check {
			if dead || dying(c.tid) {
				in.mu.Lock()
				if !c.cancelled {
					c.cancelled = true
					close(c.cancel)
				}
				in.mu.Unlock()
			}
		}
		clear(check) // no call kept alive past its request
	}
}

// connDead tells whether the FUSE connection on fd is gone (unmounted or
// aborted): /dev/fuse then polls as an error.
func connDead(fd int) bool {
	if fd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0
}

// sigkill is SIGKILL's bit in /proc's signal masks.
const sigkill = 1 << (syscall.SIGKILL - 1)

// dying tells whether thread tid has SIGKILL pending, or is gone. A tid of
// 0 (a caller outside the daemon's pid namespace) is never dying: the
// request then runs to its end.
func dying(tid uint32) bool {
	if tid == 0 {
		return false
	}
	status, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return true
	}
	if err != nil {
		return false
	}
	for _, field := range []string{"SigPnd:", "ShdPnd:"} {
		i := bytes.Index(status, []byte("\n"+field))
		if i < 0 {
			continue
		}
		line := status[i+1+len(field):]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		mask, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 64)
		if err == nil && mask&sigkill != 0 {
			return true
		}
	}
	return false
}
