package nas

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends"
)

// tmpPrefix starts the names of in-flight writes. Such names are never
// listed, never served, and refused as keys, so nothing half-written can be
// seen or clobbered through the backend.
const tmpPrefix = ".mlfsd-tmp-"

// resolveFlags confine every path walk to the root: the kernel refuses
// absolute symlinks, ".." above the root and symlinks whose target lies
// outside it (EXDEV), and /proc magic links. Symlinks that stay inside the
// root are followed.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// errEscape is what a path that would leave the root resolves to.
var errEscape = fmt.Errorf("%w: path leads outside the backend root", backends.ErrPermission)

// errReserved marks a key naming an in-flight write's temporary file.
var errReserved = errors.New("name is reserved for in-flight writes")

// parsedKey is a validated key.
type parsedKey struct {
	// rel is the path relative to the root ("." for the root itself).
	rel string
	// key is the key without its trailing '/'.
	key string
	// slash records a trailing '/' (the key names a directory).
	slash bool
}

// parseKey validates a key: '/'-separated, no leading '/', no empty, "." or
// ".." segments, no NUL, no segment starting with tmpPrefix. Reading
// operations treat a reserved name as missing; writing ones refuse it.
func parseKey(op, key string, writing bool) (parsedKey, error) {
	p := parsedKey{key: key}
	if strings.HasSuffix(key, "/") {
		p.key, p.slash = key[:len(key)-1], true
	}
	if p.key == "" {
		if p.slash {
			return p, backends.Wrap(op, key, backends.ErrInvalid, errors.New("a key cannot be \"/\""))
		}
		p.rel = "."
		return p, nil
	}
	if strings.IndexByte(p.key, 0) >= 0 {
		return p, backends.Wrap(op, key, backends.ErrInvalid, errors.New("NUL byte in key"))
	}
	for _, seg := range strings.Split(p.key, "/") {
		switch {
		case seg == "":
			return p, backends.Wrap(op, key, backends.ErrInvalid, errors.New("empty path segment (leading '/' or \"//\")"))
		case seg == "." || seg == "..":
			return p, backends.Wrap(op, key, backends.ErrInvalid, fmt.Errorf("path segment %q not allowed", seg))
		case strings.HasPrefix(seg, tmpPrefix):
			if writing {
				return p, backends.Wrap(op, key, backends.ErrInvalid, errReserved)
			}
			return p, backends.Wrap(op, key, backends.ErrNotExist, errReserved)
		}
	}
	p.rel = p.key
	return p, nil
}

// splitRel splits a relative path into its parent ("." at the top) and
// last element.
func splitRel(rel string) (parent, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// openBeneath opens rel relative to dirfd without ever leaving dirfd's
// tree. EXDEV (the walk would leave it) becomes errEscape.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		// openat2 refuses O_NOCTTY beside O_PATH.
		flags |= unix.O_NOCTTY
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveFlags}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && attempt < 16:
			// The kernel saw a concurrent rename while checking "..":
			// retry, as openat2(2) advises.
			continue
		case err == unix.EXDEV:
			return -1, errEscape
		default:
			return -1, err
		}
	}
}

// mapErr wraps an OS error in the matching sentinel, with the operation and
// key for the log line at the FUSE edge.
func mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *backends.OpError
	if errors.As(err, &oe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &backends.OpError{Op: op, Key: key, Err: err}
	}
	if errors.Is(err, errEscape) {
		return &backends.OpError{Op: op, Key: key, Err: err}
	}
	var sentinel error
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOENT:
			sentinel = backends.ErrNotExist
		case unix.EACCES, unix.EPERM, unix.EROFS:
			sentinel = backends.ErrPermission
		case unix.ENOTEMPTY:
			sentinel = backends.ErrNotEmpty
		case unix.EEXIST:
			sentinel = backends.ErrExist
		case unix.ENOSPC, unix.EDQUOT:
			sentinel = backends.ErrNoSpace
		case unix.ENOTDIR:
			sentinel = backends.ErrNotDir
		case unix.EISDIR:
			sentinel = backends.ErrIsDir
		case unix.ENAMETOOLONG:
			sentinel = backends.ErrNameTooLong
		case unix.EINVAL, unix.ELOOP:
			sentinel = backends.ErrInvalid
		case unix.EXDEV, unix.EOPNOTSUPP:
			// A rename across mount points inside the root.
			sentinel = backends.ErrUnsupported
		case unix.ESTALE, unix.ETIMEDOUT, unix.EAGAIN:
			// NFS: a handle invalidated under us, or a server timeout.
			sentinel = backends.ErrTransient
		}
	}
	return backends.Wrap(op, key, sentinel, err)
}
