package ossemu

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// uploadRecord is ROOT/.ossemu/uploads/<id>/upload.json.
type uploadRecord struct {
	Bucket    string            `json:"bucket"`
	Key       string            `json:"key"`
	CType     string            `json:"ctype,omitempty"`
	User      map[string]string `json:"user,omitempty"`
	ACL       string            `json:"acl,omitempty"`
	Tags      []tag             `json:"tags,omitempty"`
	Initiated time.Time         `json:"initiated"`
}

var uploadIDRe = regexp.MustCompile(`^[0-9A-F]{32}$`)

func (s *Server) uploadDir(id string) string {
	return filepath.Join(s.root, internalDir, "uploads", id)
}

func (s *Server) loadUpload(id, bucket, key string) (uploadRecord, bool) {
	if !uploadIDRe.MatchString(id) {
		return uploadRecord{}, false
	}
	b, err := os.ReadFile(filepath.Join(s.uploadDir(id), "upload.json"))
	if err != nil {
		return uploadRecord{}, false
	}
	var u uploadRecord
	if json.Unmarshal(b, &u) != nil || u.Bucket != bucket || u.Key != key {
		return uploadRecord{}, false
	}
	return u, true
}

type initiateResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

func (s *Server) handleInitiate(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "InitiateMultipartUpload")
	if err := checkKey(rc.key); err != nil || strings.HasSuffix(rc.key, "/") {
		s.receiveError(w, r, rc, errBadKey)
		return
	}
	acl, tags, err := objectHeaders(r, rc)
	if err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	// The id starts with the initiation time, so ids of one key sort in
	// the order the uploads began (as the stores list them).
	now := time.Now()
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	id := fmt.Sprintf("%016X%s", uint64(now.UnixNano()), strings.ToUpper(hex.EncodeToString(rb[:])))
	rec := uploadRecord{Bucket: rc.bucket, Key: rc.key, CType: r.Header.Get("Content-Type"), User: userMeta(r.Header), ACL: acl, Tags: tags, Initiated: now}
	b, _ := json.Marshal(rec)
	dir := s.uploadDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "upload.json"), b, 0o644); err != nil {
		os.RemoveAll(dir)
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	enc := r.URL.Query().Get("encoding-type") == "url"
	s.writeXML(w, r, rc, http.StatusOK, initiateResult{Bucket: rc.bucket, Key: encodeKey(rc.key, enc), UploadID: id})
}

func partName(n int) string { return fmt.Sprintf("part-%05d", n) }

func (s *Server) handleUploadPart(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	rc.op = "UploadPart"
	q := r.URL.Query()
	id := q.Get("uploadId")
	if s.copySource(r, rc) == "" {
		s.count(rc.op)
	}
	if _, ok := s.loadUpload(id, rc.bucket, rc.key); !ok {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	n, err := strconv.Atoi(q.Get("partNumber"))
	if err != nil || n < 1 || n > 10000 {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "partNumber must be an integer from 1 to 10000")
		return
	}
	var f *os.File
	var hw *hashWriter
	if src := s.copySource(r, rc); src != "" {
		s.begin(rc, "UploadPartCopy")
		f, hw, err = s.copyRange(r, src)
		if errors.Is(err, fs.ErrNotExist) {
			s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified source key does not exist.")
			return
		}
		if err != nil {
			if !s.conditionalError(w, r, rc, err) {
				s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", err.Error())
			}
			return
		}
	} else if f, hw, err = s.receive(r, rc); err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	m := meta{ETag: hw.etag(), CRC64: hw.crc.Sum64(), HasCRC: true, Size: hw.n}
	err = writeMetaFd(f, m)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.uploadDir(id), partName(n)))
	}
	if err != nil {
		os.Remove(f.Name())
		// The upload was aborted or completed meanwhile.
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	w.Header().Set("ETag", `"`+m.ETag+`"`)
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(m.CRC64, 10))
	if rc.op == "UploadPartCopy" {
		s.writeXML(w, r, rc, http.StatusOK, copyPartResult{LastModified: isoTime(time.Now()), ETag: `"` + m.ETag + `"`})
		return
	}
	w.WriteHeader(http.StatusOK)
}

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

// copyRange copies (a range of) an existing object into a temporary file,
// for UploadPartCopy (x-*-copy-source with x-*-copy-source-range).
func (s *Server) copyRange(r *http.Request, src string) (*os.File, *hashWriter, error) {
	srcBucket, srcKey, _ := strings.Cut(src, "/")
	if !s.bucketExists(srcBucket) {
		return nil, nil, fmt.Errorf("source bucket %q does not exist", srcBucket)
	}
	oi, err := s.lookup(srcBucket, srcKey)
	if err != nil || oi.isDir {
		return nil, nil, fmt.Errorf("source object %q: %w", srcKey, fs.ErrNotExist)
	}
	// As CopyObject: the copy is of the version the client named.
	for _, h := range []string{"x-oss-copy-source-if-match", "x-amz-copy-source-if-match"} {
		if v := r.Header.Get(h); v != "" && !etagMatch(v, oi.ETag) {
			return nil, nil, errPreconditionFailed
		}
	}
	start, end := int64(0), oi.Size-1
	rv := r.Header.Get("x-amz-copy-source-range") + r.Header.Get("x-oss-copy-source-range")
	if rv != "" {
		st, en, present, ok := parseRange(rv, oi.Size)
		if !present || !ok {
			return nil, nil, fmt.Errorf("bad copy source range %q", rv)
		}
		start, end = st, en
	}
	in, err := os.Open(oi.path)
	if err != nil {
		return nil, nil, err
	}
	defer in.Close()
	f, err := s.tempFile()
	if err != nil {
		return nil, nil, err
	}
	hw := newHashWriter()
	if _, err := io.Copy(io.MultiWriter(f, hw), io.NewSectionReader(in, start, end-start+1)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	return f, hw, nil
}

type completeRequest struct {
	Parts []struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
	} `xml:"Part"`
}

type completeResult struct {
	XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

func (s *Server) handleComplete(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "CompleteMultipartUpload")
	id := r.URL.Query().Get("uploadId")
	rec, ok := s.loadUpload(id, rc.bucket, rc.key)
	if !ok {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	excl, err := ifNoneMatch(r, rc)
	if err != nil {
		s.conditionalError(w, r, rc, err)
		return
	}
	var req completeRequest
	if err := xml.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil {
		s.writeError(w, r, rc, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	if len(req.Parts) == 0 {
		s.writeError(w, r, rc, http.StatusBadRequest, "MalformedXML", "no parts")
		return
	}
	dir := s.uploadDir(id)
	f, err := s.tempFile()
	if err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	fail := func(status int, code, msg string) {
		f.Close()
		os.Remove(f.Name())
		s.writeError(w, r, rc, status, code, msg)
	}
	var crc uint64
	etags := md5.New()
	prev := 0
	// Every part but the last must be at least 100 KiB (OSS) or 5 MiB
	// (S3); the stores check at completion.
	minPart := int64(100 << 10)
	if rc.s3 {
		minPart = 5 << 20
	}
	for i, p := range req.Parts {
		if p.PartNumber <= prev {
			fail(http.StatusBadRequest, "InvalidPartOrder", "The list of parts was not in ascending order.")
			return
		}
		prev = p.PartNumber
		pp := filepath.Join(dir, partName(p.PartNumber))
		pm, ok := readMeta(pp)
		if !ok || !strings.EqualFold(strings.Trim(p.ETag, `"`), pm.ETag) {
			fail(http.StatusBadRequest, "InvalidPart", fmt.Sprintf("part %d was not uploaded or its ETag does not match", p.PartNumber))
			return
		}
		if i < len(req.Parts)-1 && pm.Size < minPart {
			fail(http.StatusBadRequest, "EntityTooSmall", fmt.Sprintf("Your proposed upload is smaller than the minimum allowed size: part %d has %d bytes; every part but the last needs at least %d.", p.PartNumber, pm.Size, minPart))
			return
		}
		in, err := os.Open(pp)
		if err != nil {
			fail(http.StatusBadRequest, "InvalidPart", fmt.Sprintf("part %d: %v", p.PartNumber, err))
			return
		}
		if pm.HasCRC {
			// A kernel-side copy (copy_file_range); the part's CRC is known.
			_, err = io.Copy(f, in)
			crc = crc64Combine(crc, pm.CRC64, pm.Size)
		} else {
			h := crc64.New(crcTable)
			var n int64
			n, err = io.Copy(io.MultiWriter(f, h), in)
			crc = crc64Combine(crc, h.Sum64(), n)
		}
		in.Close()
		if err != nil {
			fail(http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		b, _ := hex.DecodeString(pm.ETag)
		etags.Write(b)
	}
	etag := fmt.Sprintf("%X-%d", etags.Sum(nil), len(req.Parts))
	m := meta{ETag: etag, CRC64: crc, HasCRC: true, Multipart: true, CType: rec.CType, User: rec.User, ACL: rec.ACL, Tags: rec.Tags}
	oi, ok := s.publishConditional(w, r, rc, f, m, excl)
	if !ok {
		return
	}
	os.RemoveAll(dir)
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	w.Header().Set("ETag", `"`+etag+`"`)
	enc := r.URL.Query().Get("encoding-type") == "url"
	s.writeXML(w, r, rc, http.StatusOK, completeResult{Location: "/" + rc.bucket + "/" + rc.key, Bucket: rc.bucket,
		Key: encodeKey(rc.key, enc), ETag: `"` + etag + `"`})
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "AbortMultipartUpload")
	id := r.URL.Query().Get("uploadId")
	if _, ok := s.loadUpload(id, rc.bucket, rc.key); !ok {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	if err := os.RemoveAll(s.uploadDir(id)); err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// The listings below follow the real stores' documents field by field
// (OSS ListParts / ListMultipartUploads; S3 adds Initiator, Owner and
// StorageClass and has no HashCrc64ecma). The crash recovery of the
// write-back store relies on them: keep them exact.

type listPartsResult struct {
	XMLName              xml.Name  `xml:"ListPartsResult"`
	EncodingType         string    `xml:"EncodingType,omitempty"`
	Bucket               string    `xml:"Bucket"`
	Key                  string    `xml:"Key"`
	UploadID             string    `xml:"UploadId"`
	Initiator            *owner    `xml:"Initiator,omitempty"`
	Owner                *owner    `xml:"Owner,omitempty"`
	StorageClass         string    `xml:"StorageClass"`
	PartNumberMarker     int       `xml:"PartNumberMarker"`
	NextPartNumberMarker int       `xml:"NextPartNumberMarker"`
	MaxParts             int       `xml:"MaxParts"`
	IsTruncated          bool      `xml:"IsTruncated"`
	Parts                []xmlPart `xml:"Part"`
}

type xmlPart struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	CRC64        string `xml:"HashCrc64ecma,omitempty"`
	Size         int64  `xml:"Size"`
}

// intParam parses an optional non-negative integer query parameter.
func intParam(q url.Values, name string, def, maxv int) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(n, maxv), true
}

func (s *Server) handleListParts(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "ListParts")
	q := r.URL.Query()
	id := q.Get("uploadId")
	if _, ok := s.loadUpload(id, rc.bucket, rc.key); !ok {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.")
		return
	}
	maxParts, ok1 := intParam(q, "max-parts", 1000, 1000)
	marker, ok2 := intParam(q, "part-number-marker", 0, 10000)
	if !ok1 || !ok2 {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "max-parts and part-number-marker must be non-negative integers")
		return
	}
	des, _ := os.ReadDir(s.uploadDir(id))
	enc := q.Get("encoding-type") == "url"
	out := listPartsResult{Bucket: rc.bucket, Key: encodeKey(rc.key, enc), UploadID: id, StorageClass: "Standard",
		PartNumberMarker: marker, MaxParts: maxParts}
	if enc {
		out.EncodingType = "url"
	}
	if rc.s3 {
		out.StorageClass = "STANDARD"
		out.Initiator = &owner{ID: "ossemu", DisplayName: "ossemu"}
		out.Owner = out.Initiator
	}
	for _, de := range des { // ReadDir sorts by name: part-00001, part-00002, ...
		n, err := strconv.Atoi(strings.TrimPrefix(de.Name(), "part-"))
		if err != nil || !strings.HasPrefix(de.Name(), "part-") || n <= marker {
			continue
		}
		if len(out.Parts) == maxParts {
			out.IsTruncated = true
			break
		}
		pp := filepath.Join(s.uploadDir(id), de.Name())
		fi, err := os.Stat(pp)
		pm, ok := readMeta(pp)
		if err != nil || !ok {
			continue // being replaced, or gone with the upload
		}
		xp := xmlPart{PartNumber: n, LastModified: isoTime(fi.ModTime()), ETag: `"` + pm.ETag + `"`, Size: fi.Size()}
		if !rc.s3 {
			xp.CRC64 = strconv.FormatUint(pm.CRC64, 10)
		}
		out.Parts = append(out.Parts, xp)
		out.NextPartNumberMarker = n
	}
	s.writeXML(w, r, rc, http.StatusOK, out)
}

type listUploadsResult struct {
	XMLName            xml.Name    `xml:"ListMultipartUploadsResult"`
	EncodingType       string      `xml:"EncodingType,omitempty"`
	Bucket             string      `xml:"Bucket"`
	KeyMarker          string      `xml:"KeyMarker"`
	UploadIDMarker     string      `xml:"UploadIdMarker"`
	NextKeyMarker      string      `xml:"NextKeyMarker"`
	NextUploadIDMarker string      `xml:"NextUploadIdMarker"`
	Delimiter          string      `xml:"Delimiter"`
	Prefix             string      `xml:"Prefix"`
	MaxUploads         int         `xml:"MaxUploads"`
	IsTruncated        bool        `xml:"IsTruncated"`
	Uploads            []xmlUpload `xml:"Upload"`
	CommonPrefixes     []xmlPrefix `xml:"CommonPrefixes"`
}

type xmlUpload struct {
	Key          string `xml:"Key"`
	UploadID     string `xml:"UploadId"`
	Initiator    *owner `xml:"Initiator,omitempty"`
	Owner        *owner `xml:"Owner,omitempty"`
	StorageClass string `xml:"StorageClass,omitempty"`
	Initiated    string `xml:"Initiated"`
}

// handleListUploads lists the uploads in progress in key order, and for
// one key in upload id order, which is the order they were initiated in
// (ids start with the initiation time). key-marker alone skips keys up to
// and including it; with upload-id-marker, the uploads of key-marker after
// that id are listed too. A delimiter folds keys into common prefixes.
func (s *Server) handleListUploads(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.beginInBucket(w, r, rc, "ListMultipartUploads") {
		return
	}
	q := r.URL.Query()
	maxUploads, ok := intParam(q, "max-uploads", 1000, 1000)
	if !ok {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "max-uploads must be a non-negative integer")
		return
	}
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	keyMarker, idMarker := q.Get("key-marker"), q.Get("upload-id-marker")
	enc := q.Get("encoding-type") == "url"
	des, _ := os.ReadDir(filepath.Join(s.root, internalDir, "uploads"))
	type upload struct {
		key, id string
		rec     uploadRecord
	}
	var all []upload
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(s.uploadDir(de.Name()), "upload.json"))
		var u uploadRecord
		if err != nil || json.Unmarshal(b, &u) != nil || u.Bucket != rc.bucket || !strings.HasPrefix(u.Key, prefix) {
			continue
		}
		all = append(all, upload{u.Key, de.Name(), u})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].key != all[j].key {
			return all[i].key < all[j].key
		}
		return all[i].id < all[j].id
	})
	out := listUploadsResult{Bucket: rc.bucket, KeyMarker: encodeKey(keyMarker, enc), UploadIDMarker: idMarker,
		Delimiter: encodeKey(delim, enc), Prefix: encodeKey(prefix, enc), MaxUploads: maxUploads}
	if enc {
		out.EncodingType = "url"
	}
	lastPrefix := ""
	n := 0
	for _, u := range all {
		if keyMarker != "" && (u.key < keyMarker || (u.key == keyMarker && (idMarker == "" || u.id <= idMarker))) {
			continue
		}
		if delim != "" {
			if i := strings.Index(u.key[len(prefix):], delim); i >= 0 {
				cp := u.key[:len(prefix)+i+len(delim)]
				if cp == lastPrefix {
					continue
				}
				if n == maxUploads {
					out.IsTruncated = true
					break
				}
				lastPrefix = cp
				out.CommonPrefixes = append(out.CommonPrefixes, xmlPrefix{Prefix: encodeKey(cp, enc)})
				out.NextKeyMarker, out.NextUploadIDMarker = encodeKey(cp, enc), ""
				n++
				continue
			}
		}
		if n == maxUploads {
			out.IsTruncated = true
			break
		}
		xu := xmlUpload{Key: encodeKey(u.key, enc), UploadID: u.id, Initiated: isoTime(u.rec.Initiated)}
		if rc.s3 {
			xu.Initiator = &owner{ID: "ossemu", DisplayName: "ossemu"}
			xu.Owner, xu.StorageClass = xu.Initiator, "STANDARD"
		}
		out.Uploads = append(out.Uploads, xu)
		out.NextKeyMarker, out.NextUploadIDMarker = encodeKey(u.key, enc), u.id
		n++
	}
	s.writeXML(w, r, rc, http.StatusOK, out)
}
