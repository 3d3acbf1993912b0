package ossemu

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// handleAppend is OSS AppendObject: POST /key?append&position=N adds the
// body at offset N of an Appendable object, creating it when N is 0 and
// the key is free. As in OSS: a position other than the object's length is
// refused with 409 PositionNotEqualToLength (x-oss-next-append-position
// says where to append), a Normal or Multipart object with 409
// ObjectNotAppendable; the reply carries x-oss-next-append-position and
// the CRC64 of the whole object, which the SDK checks against its own.
//
// The body is received into a temporary file first, so a broken or
// mismatching body (Content-MD5) changes nothing; appends to the server
// are serialized.
func (s *Server) handleAppend(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "AppendObject")
	if err := checkKey(rc.key); err != nil || strings.HasSuffix(rc.key, "/") {
		s.receiveError(w, r, rc, errBadKey)
		return
	}
	pos, err := strconv.ParseInt(r.URL.Query().Get("position"), 10, 64)
	if err != nil || pos < 0 {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "position must be a non-negative integer")
		return
	}
	if _, _, err := objectHeaders(r, rc); err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	// Check before taking the body, as OSS does (it answers at once).
	if cur, ok, code := s.appendTarget(rc); !ok {
		s.appendRefused(w, r, rc, cur, code)
		return
	} else if cur.Size != pos {
		s.appendRefused(w, r, rc, cur, "PositionNotEqualToLength")
		return
	}
	f, hw, err := s.receive(r, rc)
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	cur, ok, code := s.appendTarget(rc)
	switch {
	case !ok:
		s.appendRefused(w, r, rc, cur, code)
		return
	case cur.Size != pos:
		s.appendRefused(w, r, rc, cur, "PositionNotEqualToLength")
		return
	}
	var m meta
	if cur.exists {
		m, err = s.appendData(f, cur, hw)
	} else {
		f2, cerr := s.tempFile()
		if cerr != nil {
			s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", cerr.Error())
			return
		}
		var oi objInfo
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			if _, err = io.Copy(f2, f); err == nil {
				m0 := meta{ETag: hw.etag(), CRC64: hw.crc.Sum64(), HasCRC: true, Appendable: true,
					CType: r.Header.Get("Content-Type"), User: userMeta(r.Header)}
				m0.ACL, m0.Tags, _ = objectHeaders(r, rc) // checked on entry
				oi, err = s.publish(f2, rc.bucket, rc.key, m0)
				m = oi.meta
			}
		}
		if err != nil {
			f2.Close()
			os.Remove(f2.Name())
		}
	}
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	h := w.Header()
	h.Set("x-oss-next-append-position", strconv.FormatInt(m.Size, 10))
	h.Set("x-oss-hash-crc64ecma", strconv.FormatUint(m.CRC64, 10))
	h.Set("ETag", `"`+m.ETag+`"`)
	w.WriteHeader(http.StatusOK)
}

// appendState is what an append finds at its key.
type appendState struct {
	meta
	exists bool
	path   string
}

// appendTarget looks the key up for an append. ok is false (with the
// error code) when the key holds something that cannot be appended to.
func (s *Server) appendTarget(rc *reqCtx) (appendState, bool, string) {
	oi, err := s.lookup(rc.bucket, rc.key)
	if errors.Is(err, fs.ErrNotExist) {
		if fi, serr := os.Stat(s.objPath(rc.bucket, rc.key)); serr == nil && fi.IsDir() {
			return appendState{}, false, "ObjectConflict"
		}
		return appendState{}, true, ""
	}
	if err != nil || oi.isDir {
		return appendState{}, false, "ObjectConflict"
	}
	st := appendState{meta: oi.meta, exists: true, path: oi.path}
	if !oi.Appendable {
		return st, false, "ObjectNotAppendable"
	}
	return st, true, ""
}

func (s *Server) appendRefused(w http.ResponseWriter, r *http.Request, rc *reqCtx, cur appendState, code string) {
	switch code {
	case "PositionNotEqualToLength":
		w.Header().Set("x-oss-next-append-position", strconv.FormatInt(cur.Size, 10))
		if cur.HasCRC {
			w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(cur.CRC64, 10))
		}
		s.writeError(w, r, rc, http.StatusConflict, code, "Position is not equal to file length")
	case "ObjectNotAppendable":
		s.writeError(w, r, rc, http.StatusConflict, code, "The object is not appendable")
	default:
		s.receiveError(w, r, rc, errConflict)
	}
}

// appendData adds the received data (f, hashed by hw) to the end of the
// existing object, then records the new size, CRC and ETag. Called with
// appendMu held.
func (s *Server) appendData(f *os.File, cur appendState, hw *hashWriter) (meta, error) {
	if !cur.HasCRC {
		return meta{}, fmt.Errorf("%s: no CRC recorded for the appendable object", cur.path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return meta{}, err
	}
	out, err := os.OpenFile(cur.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return meta{}, err
	}
	defer out.Close()
	crc := crcWriter{crc: cur.CRC64}
	n, err := io.Copy(io.MultiWriter(out, &crc), f)
	if err == nil && n != hw.n {
		err = fmt.Errorf("appended %d of %d bytes", n, hw.n)
	}
	if err != nil {
		// Leave the object as it was.
		_ = out.Truncate(cur.Size)
		return meta{}, err
	}
	fi, err := out.Stat()
	if err != nil {
		return meta{}, err
	}
	// The ETag of an appendable object is not the MD5 of its content (as
	// in OSS): a digest of the previous ETag and the appended data's MD5,
	// new for every version.
	prev, _ := hex.DecodeString(cur.ETag)
	etag := md5.Sum(append(prev, hw.md5.Sum(nil)...))
	m := cur.meta
	m.Size, m.MtimeNs = fi.Size(), fi.ModTime().UnixNano()
	m.CRC64 = crc.crc
	m.ETag = strings.ToUpper(hex.EncodeToString(etag[:]))
	if err := writeMetaFd(out, m); err != nil {
		return meta{}, err
	}
	return m, nil
}

// crcWriter continues a CRC-64/ECMA over what is written to it.
type crcWriter struct{ crc uint64 }

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc64.Update(c.crc, crcTable, p)
	return len(p), nil
}
