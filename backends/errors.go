package backends

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sentinel errors. Backends wrap them (with %w) around the store's own error,
// so the cause survives for logs while callers decide with errors.Is.
// The FUSE edge maps each to one errno; anything else becomes EIO.
var (
	ErrNotExist        = errors.New("does not exist")
	ErrExist           = errors.New("already exists")
	ErrPermission      = errors.New("permission denied")
	ErrNotEmpty        = errors.New("directory not empty")
	ErrIsDir           = errors.New("is a directory")
	ErrNotDir          = errors.New("not a directory")
	ErrInvalid         = errors.New("invalid argument")
	ErrUnsupported     = errors.New("not supported by this store")
	ErrVersionMismatch = errors.New("object changed (version mismatch)")
	ErrNoSpace         = errors.New("no space left")
	// ErrTransient marks a failure worth retrying (5xx, throttling,
	// connection reset) that outlasted the backend's own retries.
	ErrTransient = errors.New("transient storage error")
)

// OpError records the operation and key that failed and the underlying cause.
type OpError struct {
	Op  string // "stat", "list", "read", "write", "delete", ...
	Key string
	Err error
}

// Error names the operation, the key unless it is the root (""), and the cause.
func (e *OpError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the cause, so errors.Is sees the sentinel.
func (e *OpError) Unwrap() error { return e.Err }

// Wrap returns an *OpError whose cause wraps sentinel and cause together:
// errors.Is(err, sentinel) holds and the original error stays visible.
// A nil cause yields the sentinel alone.
func Wrap(op, key string, sentinel, cause error) error {
	err := sentinel
	if cause != nil && sentinel != nil {
		err = fmt.Errorf("%w: %w", sentinel, cause)
	} else if cause != nil {
		err = cause
	}
	return &OpError{Op: op, Key: key, Err: err}
}

// Explain returns an error whose message is msg alone, a sentence that
// names the cause and the fix, while errors.Is still sees sentinel and
// cause: for the first contact with a store, where the sentinel's word
// ("transient storage error") and the library's text would only bury it.
func Explain(msg string, sentinel, cause error) error {
	return &explained{msg: msg, errs: []error{sentinel, cause}}
}

type explained struct {
	msg  string
	errs []error
}

func (e *explained) Error() string { return e.msg }

func (e *explained) Unwrap() []error { return e.errs }

// StoreCode returns the store's own name for the failure err reports: the
// OSS or S3 error code ("NoSuchKey", "AccessDenied", "SlowDown"), the class
// of an HDFS remote exception without its package ("SafeModeException"),
// or the errno of a NAS call ("ENOENT"). It is "" when the store gave none:
// no answer (a connection reset, a timeout), or an answer without a code
// (a HEAD's 404 has no body). Metrics count failures by it; it is not for
// deciding what to do (use the sentinels).
func StoreCode(err error) string {
	if err == nil {
		return ""
	}
	var coded interface{ ErrorCode() string } // S3 (smithy.APIError), OSS (the backend's wrapper)
	if errors.As(err, &coded) {
		if c := coded.ErrorCode(); c != "" {
			return c
		}
	}
	var remote interface{ Exception() string } // HDFS (hdfs.Error)
	if errors.As(err, &remote) {
		c := remote.Exception()
		if i := strings.LastIndexByte(c, '.'); i >= 0 {
			c = c[i+1:]
		}
		return c
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return ""
}
