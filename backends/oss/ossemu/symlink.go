package ossemu

import (
	"errors"
	"io/fs"
	"net/http"
	"net/url"
)

// Symlink objects (PutSymlink, GetSymlink). A link is stored like any
// object, with an empty data file, and its target in meta.Symlink exactly
// as the client sent it in X-Oss-Symlink-Target (URL-escaped). As in OSS,
// GET and HEAD of a link serve its target (404 when the target is
// missing), listings show it with Type "Symlink", DELETE removes the link.
// A link whose target is itself a link serves that link's empty object.

const headerSymlinkTarget = "X-Oss-Symlink-Target"

// handlePutSymlink serves PUT ?symlink.
func (s *Server) handlePutSymlink(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "PutSymlink")
	drainBody(r)
	target := r.Header.Get(headerSymlinkTarget)
	if target == "" {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "missing "+headerSymlinkTarget)
		return
	}
	if err := checkKey(rc.key); err != nil || rc.key[len(rc.key)-1] == '/' {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidObjectName", "invalid symlink object name")
		return
	}
	if r.Header.Get("X-Oss-Forbid-Overwrite") == "true" {
		if _, err := s.lookupRaw(rc.bucket, rc.key); err == nil {
			s.writeError(w, r, rc, http.StatusConflict, "FileAlreadyExists", "The object you specified already exists and can not be overwritten.")
			return
		}
	}
	f, err := s.tempFile()
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	m := meta{ETag: emptyMD5, HasCRC: true, Symlink: target, User: userMeta(r.Header)}
	oi, err := s.publish(f, rc.bucket, rc.key, m)
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	w.Header().Set("ETag", `"`+oi.ETag+`"`)
	w.WriteHeader(http.StatusOK)
}

// handleGetSymlink serves GET ?symlink: the target in a header.
func (s *Server) handleGetSymlink(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "GetSymlink")
	oi, err := s.lookupRaw(rc.bucket, rc.key)
	if err != nil {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	if oi.Symlink == "" {
		s.writeError(w, r, rc, http.StatusBadRequest, "NotSymlink", "The specified object is not a symlink.")
		return
	}
	w.Header().Set(headerSymlinkTarget, oi.Symlink)
	w.Header().Set("ETag", `"`+oi.ETag+`"`)
	w.Header().Set("Last-Modified", oi.mtime.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
}

// followLink resolves a link found by lookup to its target object.
func (s *Server) followLink(bucket string, link objInfo) (objInfo, error) {
	target, err := url.QueryUnescape(link.Symlink)
	if err != nil {
		return objInfo{}, fs.ErrNotExist
	}
	oi, err := s.lookupRaw(bucket, target)
	if err != nil || oi.isDir {
		return objInfo{}, errors.Join(fs.ErrNotExist, err)
	}
	return oi, nil
}
