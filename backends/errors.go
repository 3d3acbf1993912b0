package backends

import (
	"errors"
	"fmt"
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
