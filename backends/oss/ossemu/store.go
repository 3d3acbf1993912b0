package ossemu

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On-disk layout:
//
//	ROOT/<bucket>/<key>        object data, a plain file ("a/b/" keys are directories)
//	ROOT/.ossemu/tmp/          uploads land here first, then rename into place
//	ROOT/.ossemu/uploads/<id>/ multipart uploads in progress (upload.json, part-NNNNN)
//
// Object metadata (ETag, CRC64, content type, user metadata) lives in the
// extended attribute xattrMeta of the data file, written on the temporary file
// before the rename so data and metadata appear together. The record carries
// the size and mtime it describes: a file changed with ordinary tools is
// detected and its metadata recomputed, so seeded data just works.
// An explicit directory marker ("a/b/" written by a client) is a directory
// carrying xattrMarker; an empty directory also reads as a marker, so empty
// directories created by hand are visible.
const (
	internalDir = ".ossemu"
	xattrMeta   = "user.ossemu.meta"
	xattrMarker = "user.ossemu.marker"
)

// crcTable is the CRC-64/ECMA-182 table OSS uses for x-oss-hash-crc64ecma.
var crcTable = crc64.MakeTable(crc64.ECMA)

// emptyMD5 is the ETag of an empty object.
const emptyMD5 = "D41D8CD98F00B204E9800998ECF8427E"

// meta is the metadata record of one object.
type meta struct {
	Size      int64  `json:"size"`
	MtimeNs   int64  `json:"mtime_ns"`
	ETag      string `json:"etag"`      // without quotes
	CRC64     uint64 `json:"crc64"`     // valid when HasCRC
	HasCRC    bool   `json:"has_crc"`   // false for seeded files until first computed
	Multipart bool   `json:"multipart"` // object type "Multipart" rather than "Normal"
	// Appendable marks an object made by AppendObject (type "Appendable"):
	// only such an object (or none) can be appended to.
	Appendable bool              `json:"appendable,omitempty"`
	CType      string            `json:"ctype,omitempty"` // Content-Type
	User       map[string]string `json:"user,omitempty"`  // user metadata, keys lower-case without prefix

	// Symlink is a symlink object's target, URL-escaped (symlink.go).
	Symlink string `json:"symlink,omitempty"`

	// ACL is the canned ACL set on the object, "" when never set; Tags its
	// tags (acl.go).
	ACL  string `json:"acl,omitempty"`
	Tags []tag  `json:"tags,omitempty"`
}

// objInfo is what a lookup returns.
type objInfo struct {
	meta
	path  string
	isDir bool // a directory marker ("a/b/")
	mtime time.Time
}

// errBadKey reports a key that cannot be stored as a path.
var errBadKey = errors.New("object key cannot be represented on disk")

// checkKey validates a key: no empty, "." or ".." segments (a trailing '/'
// is a directory marker), no NUL, segments of at most 255 bytes.
func checkKey(key string) error {
	if key == "" || len(key) > 1023 || strings.ContainsRune(key, 0) || strings.HasPrefix(key, "/") {
		return errBadKey
	}
	segs := strings.Split(strings.TrimSuffix(key, "/"), "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." || len(s) > 255 {
			return errBadKey
		}
	}
	return nil
}

// checkBucket validates a bucket name as a top-level directory name.
func checkBucket(b string) bool {
	return b != "" && !strings.HasPrefix(b, ".") && !strings.ContainsAny(b, "/\x00") && len(b) <= 255
}

func (s *Server) bucketPath(bucket string) string { return filepath.Join(s.root, bucket) }

func (s *Server) objPath(bucket, key string) string {
	return filepath.Join(s.root, bucket, filepath.FromSlash(strings.TrimSuffix(key, "/")))
}

// bucketExists reports whether ROOT/bucket is a directory.
func (s *Server) bucketExists(bucket string) bool {
	if !checkBucket(bucket) {
		return false
	}
	fi, err := os.Stat(s.bucketPath(bucket))
	return err == nil && fi.IsDir()
}

func readMeta(path string) (meta, bool) {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, xattrMeta, buf)
	if err == unix.ERANGE {
		sz, err2 := unix.Getxattr(path, xattrMeta, nil)
		if err2 != nil {
			return meta{}, false
		}
		buf = make([]byte, sz)
		n, err = unix.Getxattr(path, xattrMeta, buf)
	}
	if err != nil {
		return meta{}, false
	}
	var m meta
	if json.Unmarshal(buf[:n], &m) != nil {
		return meta{}, false
	}
	return m, true
}

func writeMetaFd(f *os.File, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return unix.Fsetxattr(int(f.Fd()), xattrMeta, b, 0)
}

func writeMetaPath(path string, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return unix.Setxattr(path, xattrMeta, b, 0)
}

func isMarker(path string) bool {
	_, err := unix.Getxattr(path, xattrMarker, nil)
	return err == nil
}

// statMeta returns the metadata of a regular file. A file without a record
// (seeded with ordinary tools) or with a stale one (changed since) is
// hashed once, on first use: its ETag is then the MD5 of its content, as
// for an object PUT in one piece, so clients that compare MD5s (rclone
// check, s3fs) can. The result is
// stored in the file's extended attribute, keyed by size and mtime; on a
// read-only tree it is kept in memory under the same key.
func (s *Server) statMeta(path string, fi fs.FileInfo) meta {
	mt := fi.ModTime().UnixNano()
	if m, ok := readMeta(path); ok && m.Size == fi.Size() && m.MtimeNs == mt {
		return m
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, fi.Size(), mt)
	s.mu.Lock()
	m, ok := s.hashed[key]
	s.mu.Unlock()
	if ok {
		return m
	}
	v, err, _ := s.hashFlight.Do(key, func() (any, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		// MD5 only (assembly, fast): the CRC64, needed only by whole-object
		// reads, is computed by the first of them (ensureCRC).
		h := md5.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return nil, err
		}
		fi2, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if fi2.Size() != fi.Size() || fi2.ModTime().UnixNano() != mt || n != fi.Size() {
			return nil, fmt.Errorf("%s changed while hashing", path)
		}
		m := meta{Size: fi.Size(), MtimeNs: mt, ETag: strings.ToUpper(hex.EncodeToString(h.Sum(nil)))}
		if old, ok := readMeta(path); ok {
			// Changed in place: keep what it was written with.
			m.CType, m.User, m.ACL, m.Tags = old.CType, old.User, old.ACL, old.Tags
		}
		// An append may have finished meanwhile: its record wins. The
		// lock keeps an append from landing between this check and the
		// write.
		s.appendMu.Lock()
		defer s.appendMu.Unlock()
		if cur, ok := readMeta(path); ok && cur.Size == fi.Size() && cur.MtimeNs == mt {
			return cur, nil
		}
		if fi3, err := os.Stat(path); err != nil || fi3.Size() != fi.Size() || fi3.ModTime().UnixNano() != mt {
			return nil, fmt.Errorf("%s changed while hashing", path)
		}
		if writeMetaPath(path, m) != nil {
			s.mu.Lock()
			s.hashed[key] = m
			s.mu.Unlock()
		}
		return m, nil
	})
	if err != nil {
		// Changing under us: an ETag that names this version of the file
		// (inode, size, mtime) and does not pretend to be its MD5.
		s.log.Debug("ossemu: cannot hash seeded file", "path", path, "err", err)
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		h := md5.New()
		var b [24]byte
		binary.LittleEndian.PutUint64(b[0:], ino)
		binary.LittleEndian.PutUint64(b[8:], uint64(fi.Size()))
		binary.LittleEndian.PutUint64(b[16:], uint64(mt))
		h.Write(b[:])
		return meta{Size: fi.Size(), MtimeNs: mt, ETag: strings.ToUpper(hex.EncodeToString(h.Sum(nil))) + "-1"}
	}
	return v.(meta)
}

// lookup finds one object, following a symlink object to its target. A key
// ending in '/' names a directory marker.
func (s *Server) lookup(bucket, key string) (objInfo, error) {
	oi, err := s.lookupRaw(bucket, key)
	if err == nil && oi.Symlink != "" {
		return s.followLink(bucket, oi)
	}
	return oi, err
}

// lookupRaw finds one object; a symlink object is returned as itself.
func (s *Server) lookupRaw(bucket, key string) (objInfo, error) {
	if err := checkKey(key); err != nil {
		return objInfo{}, err
	}
	p := s.objPath(bucket, key)
	fi, err := os.Stat(p)
	if err != nil {
		return objInfo{}, fs.ErrNotExist
	}
	if strings.HasSuffix(key, "/") {
		if !fi.IsDir() || !(isMarker(p) || dirEmpty(p)) {
			return objInfo{}, fs.ErrNotExist
		}
		m := meta{ETag: emptyMD5, HasCRC: true}
		if rec, ok := readMeta(p); ok { // ACL and tags set on the marker
			m.ACL, m.Tags = rec.ACL, rec.Tags
		}
		return objInfo{meta: m, path: p, isDir: true, mtime: fi.ModTime()}, nil
	}
	if !fi.Mode().IsRegular() {
		return objInfo{}, fs.ErrNotExist
	}
	return objInfo{meta: s.statMeta(p, fi), path: p, mtime: fi.ModTime()}, nil
}

// ensureCRC fills in the CRC of a seeded file (hashing it once, then
// storing the result) so full reads can be verified by the client.
func (s *Server) ensureCRC(oi *objInfo) error {
	if oi.HasCRC || oi.isDir {
		return nil
	}
	v, err, _ := s.crcFlight.Do(oi.path, func() (any, error) {
		f, err := os.Open(oi.path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		h := crc64.New(crcTable)
		if _, err := io.Copy(h, f); err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		m := oi.meta
		if fi.Size() != m.Size || fi.ModTime().UnixNano() != m.MtimeNs {
			return nil, fmt.Errorf("%s changed while hashing", oi.path)
		}
		m.CRC64, m.HasCRC = h.Sum64(), true
		// Best effort: a read-only tree still serves, it just rehashes.
		_ = writeMetaPath(oi.path, m)
		return m, nil
	})
	if err != nil {
		return err
	}
	oi.meta = v.(meta)
	return nil
}

func dirEmpty(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}

// hashWriter computes the ETag (MD5) and CRC64 of what passes through it.
type hashWriter struct {
	md5 hash.Hash
	crc hash.Hash64
	n   int64
}

func newHashWriter() *hashWriter {
	return &hashWriter{md5: md5.New(), crc: crc64.New(crcTable)}
}

func (h *hashWriter) Write(p []byte) (int, error) {
	h.md5.Write(p)
	h.crc.Write(p)
	h.n += int64(len(p))
	return len(p), nil
}

func (h *hashWriter) etag() string { return strings.ToUpper(hex.EncodeToString(h.md5.Sum(nil))) }

// tempFile creates a temporary file outside every bucket.
func (s *Server) tempFile() (*os.File, error) {
	return os.CreateTemp(filepath.Join(s.root, internalDir, "tmp"), "obj-")
}

// errConflict reports a key whose path collides with a directory or a file.
var errConflict = errors.New("object key conflicts with an existing object or directory of the same name")

// publish sets m on the temporary file f (already fully written), then
// renames it to the object's path, creating parent directories.
func (s *Server) publish(f *os.File, bucket, key string, m meta) (objInfo, error) {
	return s.publishWith(f, bucket, key, m, os.Rename)
}

// errExists: an exclusive publish found the key taken. Each protocol's
// caller answers it its own way: OSS's x-oss-forbid-overwrite with 409
// FileAlreadyExists, S3's If-None-Match: * with 412 PreconditionFailed.
var errExists = errors.New("object exists")

// publishIfAbsent is publish for a create-if-absent write (OSS PUT with
// x-oss-forbid-overwrite; S3 PUT, CopyObject or CompleteMultipartUpload
// with If-None-Match: *): the file is linked into place, and link(2) fails
// if anything is at the path, so of racing writers (or one racing any
// other write) exactly one publishes; the others get errExists, and the
// object stays as it was. appendMu orders it with appends, which create
// objects under that lock.
func (s *Server) publishIfAbsent(f *os.File, bucket, key string, m meta) (objInfo, error) {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	return s.publishWith(f, bucket, key, m, func(tmp, dst string) error {
		if err := os.Link(tmp, dst); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return errExists
			}
			return err
		}
		// The object is published: a temporary name left behind (it is
		// outside every bucket) must not turn the write into a failure.
		_ = os.Remove(tmp)
		return nil
	})
}

func (s *Server) publishWith(f *os.File, bucket, key string, m meta, place func(tmp, dst string) error) (objInfo, error) {
	tmp := f.Name()
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return objInfo{}, err
	}
	m.Size, m.MtimeNs = fi.Size(), fi.ModTime().UnixNano()
	err = writeMetaFd(f, m)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return objInfo{}, err
	}
	dst := s.objPath(bucket, key)
	// A concurrent delete may prune a parent between MkdirAll and Rename:
	// try a few times.
	for attempt := 0; ; attempt++ {
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			if dfi, serr := os.Lstat(dst); serr == nil && dfi.IsDir() {
				err = errConflict
			} else {
				err = place(tmp, dst)
			}
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			break
		}
	}
	s.dirs.Invalidate(s.bucketPath(bucket), filepath.Dir(dst))
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, errExists) {
			return objInfo{}, err
		}
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.EISDIR) {
			err = errConflict
		}
		return objInfo{}, err
	}
	return objInfo{meta: m, path: dst, mtime: fi.ModTime()}, nil
}

// makeMarker creates the directory for a marker key ("a/b/").
func (s *Server) makeMarker(bucket, key string) error {
	p := s.objPath(bucket, key)
	err := os.MkdirAll(p, 0o755)
	s.dirs.Invalidate(s.bucketPath(bucket), filepath.Dir(p))
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
			return errConflict
		}
		return err
	}
	return unix.Setxattr(p, xattrMarker, []byte("1"), 0)
}

// deleteObject removes a key; a missing key is not an error (as in OSS).
// Parent directories left empty are removed unless they are markers.
func (s *Server) deleteObject(bucket, key string) error {
	if checkKey(key) != nil {
		return nil
	}
	p := s.objPath(bucket, key)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	if strings.HasSuffix(key, "/") {
		if !fi.IsDir() {
			return nil
		}
		if err := os.Remove(p); err != nil {
			// Not empty: the marker goes, the children stay (as in OSS).
			_ = unix.Removexattr(p, xattrMarker)
			return nil
		}
	} else {
		if fi.IsDir() {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	s.dirs.Invalidate(s.bucketPath(bucket), filepath.Dir(p))
	s.prune(bucket, filepath.Dir(p))
	return nil
}

// prune removes empty, non-marker directories from dir up to the bucket.
func (s *Server) prune(bucket, dir string) {
	top := s.bucketPath(bucket)
	for dir != top && strings.HasPrefix(dir, top+string(filepath.Separator)) {
		if isMarker(dir) || os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
		s.dirs.Invalidate(top, dir)
	}
}
