package hdfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// Java exception classes (suffixes) that decide a sentinel.
var exceptionSentinels = []struct {
	class     string
	sentinel  error
	transient bool
}{
	{"FileNotFoundException", backends.ErrNotExist, false},
	{"AccessControlException", backends.ErrPermission, false},
	{"PathIsNotEmptyDirectoryException", backends.ErrNotEmpty, false},
	{"FileAlreadyExistsException", backends.ErrExist, false},
	{"AlreadyBeingCreatedException", backends.ErrExist, false},
	{"ParentNotDirectoryException", backends.ErrNotDir, false},
	{"InvalidPathException", backends.ErrInvalid, false},
	{"HadoopIllegalArgumentException", backends.ErrInvalid, false},
	{"DSQuotaExceededException", backends.ErrNoSpace, false},
	{"NSQuotaExceededException", backends.ErrNoSpace, false},
	{"QuotaExceededException", backends.ErrNoSpace, false},
	{"UnsupportedOperationException", backends.ErrUnsupported, false},
	{"RpcNoSuchMethodException", backends.ErrUnsupported, false},
	// Safe mode ends by itself (NameNode start-up): worth waiting out.
	{"SafeModeException", backends.ErrTransient, true},
	{"RetriableException", backends.ErrTransient, true},
	{"StandbyException", backends.ErrTransient, true},
	{"ObserverRetryOnActiveException", backends.ErrTransient, true},
}

var allSentinels = []error{
	backends.ErrNotExist, backends.ErrExist, backends.ErrPermission, backends.ErrNotEmpty,
	backends.ErrIsDir, backends.ErrNotDir, backends.ErrInvalid, backends.ErrUnsupported,
	backends.ErrVersionMismatch, backends.ErrNoSpace, backends.ErrTransient,
}

// classify maps an error of the client library to a sentinel and says
// whether retrying may help.
func classify(err error) (sentinel error, transient bool) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, false
	}
	var re hdfs.Error
	if errors.As(err, &re) {
		for _, e := range exceptionSentinels {
			if strings.HasSuffix(re.Exception(), e.class) {
				return e.sentinel, e.transient
			}
		}
		return nil, false
	}
	for _, s := range allSentinels {
		if errors.Is(err, s) {
			return s, s == backends.ErrTransient
		}
	}
	var ne *namenodesError
	if errors.As(err, &ne) {
		return backends.ErrTransient, true
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return backends.ErrNotExist, false
	case errors.Is(err, syscall.ENOTEMPTY): // before ErrExist, which it also matches
		return backends.ErrNotEmpty, false
	case errors.Is(err, os.ErrExist):
		return backends.ErrExist, false
	case errors.Is(err, os.ErrPermission):
		return backends.ErrPermission, false
	case errors.Is(err, os.ErrInvalid):
		return backends.ErrInvalid, false
	case errors.Is(err, hdfs.ErrReplicating):
		return backends.ErrTransient, true
	}
	if strings.Contains(err.Error(), "the file is not a directory") {
		return backends.ErrNotDir, false // the library's ReadDir of a file
	}
	if networkError(err) {
		return backends.ErrTransient, true
	}
	return nil, false
}

// networkError reports a failure of a connection to a NameNode or DataNode,
// or a DataNode answer the client could not use: all worth a retry.
func networkError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
		return true
	}
	// The library reports these as plain strings.
	msg := err.Error()
	for _, s := range []string{
		"no available namenodes", "no available datanodes", "invalid checksum",
		"invalid response from", "unexpected sequence number", "read failed:",
		"write failed:", "Ack error from datanode", "invalid ack sequence number",
		"No available datanodes",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// brokenConn reports a failure that may have left the NameNode connection
// out of step (the library never re-dials a connection that failed in the
// middle of a call), so the shared client must be replaced.
func brokenConn(err error) bool {
	var re hdfs.Error
	if errors.As(err, &re) {
		return false // a well-formed remote exception: the connection is fine
	}
	sentinel, transient := classify(err)
	return transient && sentinel == backends.ErrTransient
}

// wrap builds the error an operation returns.
func wrap(op, key string, sentinel error, transient bool, err error) error {
	var oe *backends.OpError
	if errors.As(err, &oe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &backends.OpError{Op: op, Key: key, Err: err}
	}
	err = explain(err)
	if sentinel == nil || errors.Is(err, sentinel) {
		return &backends.OpError{Op: op, Key: key, Err: err}
	}
	return backends.Wrap(op, key, sentinel, err)
}

// explain rewrites the library's terse remote errors into messages that say
// what happened ("getFileInfo call failed with ERROR_APPLICATION
// (org.apache...SafeModeException)" hides the NameNode's own words).
func explain(err error) error {
	var re hdfs.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Message()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] // drop the Java stack trace
	}
	switch {
	case strings.HasSuffix(re.Exception(), "SafeModeException"):
		return fmt.Errorf("HDFS namenode is in safe mode (read-only until it leaves): %s: %w", msg, err)
	case strings.HasSuffix(re.Exception(), "AccessControlException"):
		return fmt.Errorf("HDFS permission denied: %s: %w", msg, err)
	case msg != "":
		return fmt.Errorf("%s: %w", msg, err)
	}
	return err
}

// timeoutConn gives every read and write on a connection a deadline, so a
// silent peer fails the call instead of hanging it. Reads go through a
// buffer: the library reads packet headers a few bytes at a time, which
// otherwise costs a system call each.
//
// first, when set, bounds the wait for the connection's first byte
// instead: a NameNode that accepts connections but never answers is
// reported after the connect timeout, not after the I/O timeout times the
// retries.
type timeoutConn struct {
	net.Conn
	addr     string // as dialled (the configured name), for errors
	timeout  time.Duration
	first    time.Duration
	answered atomic.Bool // a read returned data; first no longer applies
	r        *bufio.Reader
}

func newTimeoutConn(c net.Conn, addr string, timeout, first time.Duration) *timeoutConn {
	tc := &timeoutConn{Conn: c, addr: addr, timeout: timeout, first: first}
	tc.r = bufio.NewReaderSize(deadlineReader{tc}, 128<<10)
	return tc
}

func (c *timeoutConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// deadlineReader reads the raw connection under the timeout.
type deadlineReader struct{ c *timeoutConn }

func (d deadlineReader) Read(p []byte) (int, error) {
	timeout, first := d.c.timeout, d.c.first > 0 && !d.c.answered.Load()
	if first {
		timeout = d.c.first
	}
	d.c.Conn.SetReadDeadline(time.Now().Add(timeout))
	n, err := d.c.Conn.Read(p)
	if n > 0 {
		d.c.answered.Store(true)
	}
	var ne net.Error
	if first && n == 0 && errors.As(err, &ne) && ne.Timeout() {
		return 0, &silentError{addr: d.c.addr, after: timeout, err: err}
	}
	return n, err
}

// silentError reports a peer that accepted the connection and sent
// nothing within the connect timeout. The library may keep only its
// text, which therefore names the address.
type silentError struct {
	addr  string
	after time.Duration
	err   error
}

func (e *silentError) Error() string { return e.addr + " " + e.what() }

func (e *silentError) what() string {
	return fmt.Sprintf("accepted the connection but did not answer within %v (connect timeout)", e.after)
}

func (e *silentError) Unwrap() error { return e.err }

func (c *timeoutConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}

// SetDeadline is ignored: the library clears deadlines with it, and the
// per-operation timeout above is what bounds a call.
func (c *timeoutConn) SetDeadline(time.Time) error { return nil }
