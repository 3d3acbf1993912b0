package ossemu

import (
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// S3 conditional writes: a PUT, CopyObject or CompleteMultipartUpload with
// If-None-Match: * stores the object only if nothing is at its key yet;
// otherwise 412 PreconditionFailed, and the object stays as it was. Of
// racing writers the first to finish wins, as in S3: the check is the
// publication itself (publishIfAbsent: link(2), which fails if the name
// exists), so it is atomic even between emulators serving one root. OSS's
// x-oss-forbid-overwrite goes through the same publishIfAbsent and differs
// only in its answer (409 FileAlreadyExists).

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

// putIfAbsent ends a PUT with If-None-Match: *, whose body is in f with
// metadata m, as handlePut ends a plain one.
func (s *Server) putIfAbsent(w http.ResponseWriter, r *http.Request, rc *reqCtx, f *os.File, m meta) {
	oi, ok := s.publishConditional(w, r, rc, f, m, true)
	if !ok {
		return
	}
	w.Header().Set("ETag", `"`+oi.ETag+`"`)
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	w.WriteHeader(http.StatusOK)
}

// publishConditional publishes f as rc's object with m, only where the
// key is free when excl (If-None-Match: *), and answers a failure itself:
// as a conditional request's (conditionalError) where it is one. It
// reports false when it answered.
func (s *Server) publishConditional(w http.ResponseWriter, r *http.Request, rc *reqCtx, f *os.File, m meta, excl bool) (objInfo, bool) {
	publish := s.publish
	if excl {
		publish = s.publishIfAbsent
	}
	oi, err := publish(f, rc.bucket, rc.key, m)
	if err != nil {
		if !s.conditionalError(w, r, rc, err) {
			s.receiveError(w, r, rc, err)
		}
		return oi, false
	}
	return oi, true
}

// conditionalError answers a conditional write that failed its condition
// (412) or named one S3 does not implement (501); it reports false for any
// other error.
func (s *Server) conditionalError(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error) bool {
	switch {
	case errors.Is(err, errPreconditionFailed), errors.Is(err, errExists):
		// errExists: publishIfAbsent found the key taken, which S3 says
		// with 412 (OSS's forbid-overwrite PUT says 409 instead).
		s.count("PreconditionFailed")
		s.writeError(w, r, rc, http.StatusPreconditionFailed, "PreconditionFailed", errPreconditionFailed.Error())
	case errors.Is(err, errNotImplemented):
		s.writeError(w, r, rc, http.StatusNotImplemented, "NotImplemented", err.Error())
	default:
		return false
	}
	return true
}
