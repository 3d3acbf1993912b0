package cache

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// aioWriter submits the disk tier's O_DIRECT writes with Linux native AIO
// (io_submit) and learns of their completion through an eventfd that Go's
// netpoller watches: a writer waits on a channel while the device works, so
// no thread sits blocked in pwritev. A write blocked in the kernel keeps
// its thread, and the Go runtime then hands its P to another thread (the
// sysmon monitor polls every 20 µs while that happens); per block written
// that was more CPU than the write itself.
type aioWriter struct {
	ctx   uintptr  // aio_context_t
	efd   *os.File // the eventfd, in the netpoller
	efdNo int      // its number, for the iocbs (Fd() would make it blocking)

	mu    sync.Mutex
	next  uint64
	waits map[uint64]chan int64 // GUARDED_BY(mu): submitted writes by id
}

// iocb is the kernel's struct iocb (linux/aio_abi.h, little-endian).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdPwritev = 8
	iocbFlagResfd  = 1
	// aioDepth bounds the writes in flight (the write queue holds 64 runs at
	// most by default); a write finding no slot goes synchronously. The
	// kernel reserves about twice this per context from fs.aio-max-nr.
	aioDepth = 64
)

// newAIOWriter sets up an AIO context; an error means the kernel has none
// to give (no AIO, fs.aio-max-nr reached), and writes stay synchronous.
func newAIOWriter() (*aioWriter, error) {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, aioDepth, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, e
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, err
	}
	a := &aioWriter{ctx: ctx, efd: os.NewFile(uintptr(fd), "aio-eventfd"), efdNo: fd, waits: map[uint64]chan int64{}}
	go a.reap()
	return a, nil
}

// close ends the context. Every write must have completed (the cache's
// writers have returned).
func (a *aioWriter) close() {
	a.efd.Close() // ends reap
	unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
}

// reap hands each completion to its writer.
func (a *aioWriter) reap() {
	var cnt [8]byte
	var events [64]ioEvent
	var zero unix.Timespec
	for {
		if _, err := a.efd.Read(cnt[:]); err != nil {
			return // closed
		}
		for {
			n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 0, uintptr(len(events)),
				uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(&zero)), 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 || n == 0 {
				break
			}
			for _, ev := range events[:n] {
				a.mu.Lock()
				ch := a.waits[ev.data]
				delete(a.waits, ev.data)
				a.mu.Unlock()
				if ch != nil {
					ch <- ev.res
				}
			}
			if int(n) < len(events) {
				break
			}
		}
	}
}

// errAIOBusy: the context has no free slot; the caller writes synchronously.
var errAIOBusy = errors.New("aio: no free slot")

// pwritev writes bufs at off in fd (opened O_DIRECT; the buffers stay
// valid and unchanged until it returns) and waits for the device. It
// returns the bytes written, which may be short.
func (a *aioWriter) pwritev(fd int, bufs [][]byte, off int64) (int, error) {
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	ch := make(chan int64, 1)
	a.mu.Lock()
	a.next++
	id := a.next
	a.waits[id] = ch
	a.mu.Unlock()
	cb := &iocb{
		data: id, opcode: iocbCmdPwritev, fildes: uint32(fd),
		buf: uint64(uintptr(unsafe.Pointer(&iov[0]))), nbytes: uint64(len(iov)), offset: off,
		flags: iocbFlagResfd, resfd: uint32(a.efdNo),
	}
	cbs := [1]*iocb{cb}
	var e syscall.Errno
	for {
		// The kernel copies the iocb and the iovecs during the call.
		_, _, e = unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		if e != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(iov)
	runtime.KeepAlive(cb)
	if e != 0 {
		a.mu.Lock()
		delete(a.waits, id)
		a.mu.Unlock()
		if e == unix.EAGAIN {
			return 0, errAIOBusy
		}
		return 0, e
	}
	res := <-ch
	if res < 0 {
		return 0, syscall.Errno(-res)
	}
	return int(res), nil
}
