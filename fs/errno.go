package fs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
)

// errnoTable maps each sentinel to its errno. Order matters only where an
// error wraps several sentinels; the first match wins.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{backends.ErrNotExist, syscall.ENOENT},
	{backends.ErrExist, syscall.EEXIST},
	{backends.ErrPermission, syscall.EACCES},
	{backends.ErrNotEmpty, syscall.ENOTEMPTY},
	{backends.ErrIsDir, syscall.EISDIR},
	{backends.ErrNotDir, syscall.ENOTDIR},
	{backends.ErrInvalid, syscall.EINVAL},
	{backends.ErrUnsupported, syscall.ENOTSUP},
	{backends.ErrVersionMismatch, syscall.ESTALE},
	{backends.ErrNoSpace, syscall.ENOSPC},
	{backends.ErrNameTooLong, syscall.ENAMETOOLONG},
	{context.Canceled, syscall.EINTR},
	{context.DeadlineExceeded, syscall.ETIMEDOUT},
}

// ToErrno is the one place where an error becomes an errno. Sentinel errors
// map to their errno; an errno passes through; anything else is EIO, never
// ENOSYS, and is logged with the operation, path and cause, since the
// application will only ever see "input/output error".
func ToErrno(log *slog.Logger, op, path string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	errno := syscall.EIO
	known := false
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			errno, known = e.errno, true
			break
		}
	}
	if !known {
		var en syscall.Errno
		if errors.As(err, &en) && en != 0 {
			errno, known = en, true
		}
	}
	if log != nil {
		switch {
		case errno == syscall.ENOENT:
			// Lookups of missing names are routine; logging them would drown the rest.
		case !known || errno == syscall.ESTALE:
			log.Error("storage error", "op", op, "path", path, "errno", errno.Error(), "err", err)
		default:
			log.Debug("operation failed", "op", op, "path", path, "errno", errno.Error(), "err", err)
		}
	}
	return errno
}
