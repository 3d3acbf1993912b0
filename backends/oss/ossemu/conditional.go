package ossemu

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// S3 conditional writes: a PUT, CopyObject or CompleteMultipartUpload with
// If-None-Match: * stores the object only if nothing is at its key yet;
// otherwise 412 PreconditionFailed, and the object stays as it was. Of
// racing writers the first to finish wins, as in S3: the check is the
// publication itself (link(2), which fails if the name exists), so it is
// atomic without a lock, even between emulators serving one root.

// errPreconditionFailed reports a conditional write that found its key taken.
var errPreconditionFailed = errors.New("At least one of the pre-conditions you specified did not hold.")

// errNotImplemented reports a conditional header S3 does not take on writes.
var errNotImplemented = errors.New("A header you provided implies functionality that is not implemented.")

// ifNoneMatch reports whether an S3 write asks to create its key only if
// absent. S3 takes only "*" there; any other value is refused, rather than
// ignored, so a client never believes a condition held that was not checked.
// OSS requests are not S3's to condition (OSS has x-oss-forbid-overwrite).
func ifNoneMatch(r *http.Request, rc *reqCtx) (bool, error) {
	v, ok := r.Header["If-None-Match"]
	if !rc.s3 || !ok {
		return false, nil
	}
	if len(v) != 1 || strings.TrimSpace(v[0]) != "*" {
		return false, errNotImplemented
	}
	return true, nil
}

// publishIfAbsent is publish, except that it fails with
// errPreconditionFailed when an object is at key: the temporary file is
// hard-linked to the object's path, which fails if the path exists.
// appendMu orders it with appends, which create objects under that lock.
func (s *Server) publishIfAbsent(f *os.File, bucket, key string, m meta) (objInfo, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	tmp := f.Name()
	defer os.Remove(tmp)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return objInfo{}, err
	}
	m.Size, m.MtimeNs = fi.Size(), fi.ModTime().UnixNano()
	err = writeMetaFd(f, m)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return objInfo{}, err
	}
	dst := s.objPath(bucket, key)
	// A concurrent delete may prune a parent between MkdirAll and Link:
	// try a few times.
	for attempt := 0; ; attempt++ {
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = os.Link(tmp, dst)
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			break
		}
	}
	s.dirs.Invalidate(s.bucketPath(bucket), filepath.Dir(dst))
	switch {
	case err == nil:
		return objInfo{meta: m, path: dst, mtime: fi.ModTime()}, nil
	case errors.Is(err, fs.ErrExist):
		if dfi, serr := os.Lstat(dst); serr == nil && dfi.IsDir() {
			// Keys under key/ exist, not key: what a plain PUT gets.
			return objInfo{}, errConflict
		}
		return objInfo{}, errPreconditionFailed
	case errors.Is(err, syscall.ENOTDIR):
		return objInfo{}, errConflict
	}
	return objInfo{}, err
}

// putIfAbsent ends a PUT with If-None-Match: *, whose body is in f with
// metadata m, as handlePut ends a plain one.
func (s *Server) putIfAbsent(w http.ResponseWriter, r *http.Request, rc *reqCtx, f *os.File, m meta) {
	oi, err := s.publishIfAbsent(f, rc.bucket, rc.key, m)
	if err != nil {
		if !s.conditionalError(w, r, rc, err) {
			s.receiveError(w, r, rc, err)
		}
		return
	}
	w.Header().Set("ETag", `"`+oi.ETag+`"`)
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	w.WriteHeader(http.StatusOK)
}

// conditionalError answers a conditional write that failed its condition
// (412) or named one S3 does not implement (501); it reports false for any
// other error.
func (s *Server) conditionalError(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error) bool {
	switch {
	case errors.Is(err, errPreconditionFailed):
		s.count("PreconditionFailed")
		s.writeError(w, r, rc, http.StatusPreconditionFailed, "PreconditionFailed", err.Error())
	case errors.Is(err, errNotImplemented):
		s.writeError(w, r, rc, http.StatusNotImplemented, "NotImplemented", err.Error())
	default:
		return false
	}
	return true
}
