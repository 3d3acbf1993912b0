package ossemu

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// metaPrefix is the user-metadata header prefix of the client's protocol.
func (rc *reqCtx) metaPrefix() string {
	if rc.s3 {
		return "X-Amz-Meta-"
	}
	return "X-Oss-Meta-"
}

// userMeta collects x-oss-meta-* and x-amz-meta-* headers.
func userMeta(h http.Header) map[string]string {
	var m map[string]string
	for k, v := range h {
		lk := strings.ToLower(k)
		for _, p := range []string{"x-oss-meta-", "x-amz-meta-"} {
			if strings.HasPrefix(lk, p) && len(v) > 0 {
				if m == nil {
					m = map[string]string{}
				}
				m[lk[len(p):]] = v[0]
			}
		}
	}
	return m
}

func (s *Server) setObjectHeaders(w http.ResponseWriter, rc *reqCtx, oi objInfo) {
	h := w.Header()
	h.Set("ETag", `"`+oi.ETag+`"`)
	h.Set("Last-Modified", oi.mtime.UTC().Format(http.TimeFormat))
	ct := oi.CType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Accept-Ranges", "bytes")
	typ := "Normal"
	if oi.Appendable {
		typ = "Appendable"
		h.Set("x-oss-next-append-position", strconv.FormatInt(oi.Size, 10))
	} else if oi.Multipart {
		typ = "Multipart"
	}
	h.Set("x-oss-object-type", typ)
	h.Set("x-oss-storage-class", "Standard")
	if oi.HasCRC {
		h.Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	}
	// Sent lower-case, as the stores do (h.Set would send "X-Amz-Meta-Who"):
	// boto3 keeps the case of what follows the prefix.
	for k, v := range oi.User {
		h[rc.metaPrefix()+k] = []string{v}
	}
	taggingCountHeader(h, rc, oi.Tags)
}

// parseRange parses a single "bytes=" range against size. ok is false for
// a syntactically valid range that cannot be satisfied; present is false
// when there is no usable Range header (absent, malformed, multi-range).
func parseRange(v string, size int64) (start, end int64, present, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(v), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false, false
	}
	switch {
	case a == "":
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false, false
		}
		if n == 0 || size == 0 {
			return 0, 0, true, false
		}
		return max(size-n, 0), size - 1, true, true
	default:
		s, err := strconv.ParseInt(a, 10, 64)
		if err != nil || s < 0 {
			return 0, 0, false, false
		}
		e := size - 1
		if b != "" {
			e, err = strconv.ParseInt(b, 10, 64)
			if err != nil || e < s {
				return 0, 0, false, false
			}
			e = min(e, size-1)
		}
		if s >= size {
			return 0, 0, true, false
		}
		return s, e, true, true
	}
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	head := r.Method == http.MethodHead
	rc.op = "GetObject"
	if head {
		rc.op = "HeadObject"
	}
	s.count(rc.op)
	oi, err := s.lookup(rc.bucket, rc.key)
	if err != nil {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	if im := r.Header.Get("If-Match"); im != "" && !etagMatch(im, oi.ETag) {
		s.writeError(w, r, rc, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
		return
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatch(inm, oi.ETag) {
		s.setObjectHeaders(w, rc, oi)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	start, end, status, ok := s.requestedRange(w, r, rc, oi.Size)
	if !ok {
		return
	}
	if status == http.StatusOK {
		// A whole-object response carries the CRC the client verifies.
		if err := s.ensureCRC(&oi); err != nil {
			s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
	}
	n := end - start + 1
	if !s.startGetReply(w, r, rc, oi, start, end, status, head) {
		return
	}
	f, err := os.Open(oi.path)
	if err != nil {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	defer f.Close()
	w.WriteHeader(status)
	limit := n
	if rc.fault != "" {
		limit = s.cutoff(n)
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		killConn(w, r, FaultReset, true)
		return
	}
	// A LimitedReader over the *os.File lets net/http use sendfile.
	sent, err := io.Copy(bodyWriter(w, r), io.LimitReader(f, limit))
	s.add("bytes.out", sent)
	if rc.fault != "" {
		killConn(w, r, rc.fault, true)
		return
	}
	if err == nil && sent < n {
		// The file shrank under us: never pretend the body is complete.
		killConn(w, r, FaultTruncate, true)
	}
}

func etagMatch(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if v == "*" || strings.EqualFold(v, etag) {
			return true
		}
	}
	return false
}

// bodyReader returns the request's payload, decoding aws-chunked uploads,
// and its declared length (-1 when unknown).
func bodyReader(r *http.Request, rc *reqCtx) (io.Reader, int64) {
	body := requestBody(r)
	sha := r.Header.Get("X-Amz-Content-Sha256")
	if strings.HasPrefix(sha, "STREAMING-") || strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
		n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
		if err != nil {
			n = -1
		}
		c := &awsChunkedReader{r: bufio.NewReader(body), sig: rc.chunks, h: sha256.New()}
		// Signed chunks with trailers: the trailers are signed too, last
		// in the chain (x-amz-trailer-signature).
		c.signedTrailer = rc.chunks != nil && sha == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
		// A checksum sent as a trailer (X-Amz-Trailer: x-amz-checksum-crc32,
		// ...) is checked against the decoded data at the end.
		if t := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Trailer"))); strings.HasPrefix(t, "x-amz-checksum-") {
			if nh := checksumAlgs[strings.TrimPrefix(t, "x-amz-checksum-")]; nh != nil {
				c.trailer, c.sum = t, nh()
			}
		}
		return c, n
	}
	return body, r.ContentLength
}

// receive streams a request body into a temporary file, hashing it, and
// checks it against the digests the request declares (see checks).
func (s *Server) receive(r *http.Request, rc *reqCtx) (*os.File, *hashWriter, error) {
	checks, err := digestChecks(r, rc)
	if err != nil {
		drainBody(r)
		return nil, nil, err
	}
	body, n := bodyReader(r, rc)
	f, err := s.tempFile()
	if err != nil {
		return nil, nil, err
	}
	hw := newHashWriter()
	ws := []io.Writer{f, hw}
	for _, c := range checks {
		if c.h != nil {
			ws = append(ws, c.h)
		}
	}
	got, err := io.Copy(io.MultiWriter(ws...), body)
	s.add("bytes.in", got)
	if err == nil && n >= 0 && got != n {
		err = fmt.Errorf("body has %d bytes, want %d", got, n)
	}
	if err == nil {
		for _, c := range checks {
			sum := hw.md5.Sum(nil)
			switch {
			case c.h != nil:
				sum = c.h.Sum(nil)
			case c.crc64:
				sum = binary.BigEndian.AppendUint64(nil, hw.crc.Sum64())
			}
			if !bytes.Equal(sum, c.want) {
				err = &digestError{code: c.code, msg: c.msg}
				break
			}
		}
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	return f, hw, nil
}

// digestError is a body that does not match a digest the request declared
// (or a malformed digest header), with the store's error code.
type digestError struct{ code, msg string }

func (e *digestError) Error() string { return e.msg }

// digestCheck is one digest a request declares for its body.
type digestCheck struct {
	h     hash.Hash // nil: MD5 or CRC64, which the hashWriter computes anyway
	crc64 bool
	want  []byte
	code  string
	msg   string
}

// digestChecks collects what the request says its body hashes to, as the
// stores check it: Content-MD5 (OSS: InvalidDigest; S3: BadDigest, and
// InvalidDigest when malformed), x-oss-hash-crc64ecma (OSS), and S3's
// x-amz-checksum-crc32/-crc32c/-crc64nvme/-sha1/-sha256 (BadDigest) and a hex
// x-amz-content-sha256 (XAmzContentSHA256Mismatch).
func digestChecks(r *http.Request, rc *reqCtx) ([]digestCheck, error) {
	var out []digestCheck
	mismatch := "InvalidDigest"
	if rc.s3 {
		mismatch = "BadDigest"
	}
	if v := r.Header.Get("Content-MD5"); v != "" {
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(want) != md5.Size {
			return nil, &digestError{code: "InvalidDigest", msg: "The Content-MD5 you specified is not valid."}
		}
		out = append(out, digestCheck{want: want, code: mismatch, msg: "The Content-MD5 you specified did not match what we received."})
	}
	if v := r.Header.Get("x-oss-hash-crc64ecma"); v != "" && !rc.s3 {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, &digestError{code: "InvalidDigest", msg: "The x-oss-hash-crc64ecma you specified is not valid."}
		}
		out = append(out, digestCheck{crc64: true, want: binary.BigEndian.AppendUint64(nil, n), code: "InvalidDigest",
			msg: "The CRC64 you specified did not match what we received."})
	}
	if !rc.s3 {
		return out, nil
	}
	for _, name := range checksumNames {
		v := r.Header.Get("x-amz-checksum-" + name)
		if v == "" {
			continue
		}
		h := checksumAlgs[name]()
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(want) != h.Size() {
			return nil, &digestError{code: "InvalidRequest", msg: fmt.Sprintf("Value for x-amz-checksum-%s header is invalid.", name)}
		}
		out = append(out, digestCheck{h: h, want: want, code: "BadDigest",
			msg: fmt.Sprintf("The %s you specified did not match the calculated checksum.", strings.ToUpper(name))})
	}
	if v := r.Header.Get("X-Amz-Content-Sha256"); len(v) == 64 {
		want, err := hex.DecodeString(v)
		if err == nil {
			out = append(out, digestCheck{h: sha256.New(), want: want, code: "XAmzContentSHA256Mismatch",
				msg: "The provided 'x-amz-content-sha256' header does not match what was computed."})
		}
	}
	return out, nil
}

func (s *Server) receiveError(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error) {
	var de *digestError
	switch {
	case errors.As(err, &de) && de.code == "SignatureDoesNotMatch":
		s.writeError(w, r, rc, http.StatusForbidden, de.code, de.msg)
	case errors.As(err, &de):
		s.writeError(w, r, rc, http.StatusBadRequest, de.code, de.msg)
	case errors.Is(err, errBadKey):
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidObjectName", err.Error())
	case errors.Is(err, errConflict):
		s.writeError(w, r, rc, http.StatusConflict, "ObjectConflict", err.Error())
	default:
		s.writeError(w, r, rc, http.StatusBadRequest, "IncompleteBody", err.Error())
	}
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "PutObject")
	if err := checkKey(rc.key); err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	acl, tags, err := objectHeaders(r, rc)
	if err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	excl, err := ifNoneMatch(r, rc)
	if err != nil {
		s.conditionalError(w, r, rc, err)
		return
	}
	f, hw, err := s.receive(r, rc)
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	if strings.HasSuffix(rc.key, "/") {
		f.Close()
		os.Remove(f.Name())
		if hw.n != 0 {
			s.writeError(w, r, rc, http.StatusBadRequest, "InvalidObjectName", "ossemu stores a key ending in '/' as a directory: it must be empty")
			return
		}
		if _, err := s.lookupRaw(rc.bucket, rc.key); excl && err == nil {
			s.conditionalError(w, r, rc, errPreconditionFailed)
			return
		}
		if err := s.makeMarker(rc.bucket, rc.key); err != nil {
			s.receiveError(w, r, rc, err)
			return
		}
		if acl != "" || tags != nil {
			if err := s.updateObjectMeta(rc.bucket, rc.key, func(m *meta) { m.ACL, m.Tags = acl, tags }); err != nil {
				s.receiveError(w, r, rc, err)
				return
			}
		}
		w.Header().Set("ETag", `"`+emptyMD5+`"`)
		w.Header().Set("x-oss-hash-crc64ecma", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	if excl {
		s.putIfAbsent(w, r, rc, f, meta{ETag: hw.etag(), CRC64: hw.crc.Sum64(), HasCRC: true, CType: r.Header.Get("Content-Type"), User: userMeta(r.Header), ACL: acl, Tags: tags})
		return
	}
	m := meta{ETag: hw.etag(), CRC64: hw.crc.Sum64(), HasCRC: true, CType: r.Header.Get("Content-Type"), User: userMeta(r.Header), ACL: acl, Tags: tags}
	publish := s.publish
	if strings.EqualFold(r.Header.Get("X-Oss-Forbid-Overwrite"), "true") {
		// As OSS: the PUT succeeds only if the key is free, atomically.
		publish = s.publishIfAbsent
	}
	oi, err := publish(f, rc.bucket, rc.key, m)
	if errors.Is(err, errExists) {
		s.writeError(w, r, rc, http.StatusConflict, "FileAlreadyExists", "The object you specified already exists and can not be overwritten.")
		return
	}
	if err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	w.Header().Set("ETag", `"`+oi.ETag+`"`)
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	w.WriteHeader(http.StatusOK)
}

// copySource returns the decoded "bucket/key" source of a copy request, or "".
func (s *Server) copySource(r *http.Request, rc *reqCtx) string {
	if v := r.Header.Get("x-oss-copy-source"); v != "" {
		// The aliyun SDK escapes the key with url.QueryEscape.
		d, err := url.QueryUnescape(v)
		if err != nil {
			return v
		}
		return strings.TrimPrefix(d, "/")
	}
	if v := r.Header.Get("x-amz-copy-source"); v != "" {
		v, _, _ = strings.Cut(v, "?versionId=")
		d, err := url.PathUnescape(v)
		if err != nil {
			return v
		}
		return strings.TrimPrefix(d, "/")
	}
	return ""
}

type copyResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

func (s *Server) handleCopy(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "CopyObject")
	srcBucket, srcKey, _ := strings.Cut(s.copySource(r, rc), "/")
	if !s.bucketExists(srcBucket) {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The source bucket does not exist.")
		return
	}
	if err := checkKey(rc.key); err != nil || strings.HasSuffix(rc.key, "/") {
		s.receiveError(w, r, rc, errBadKey)
		return
	}
	acl, tags, err := objectHeaders(r, rc)
	if err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	excl, err := ifNoneMatch(r, rc)
	if err != nil {
		s.conditionalError(w, r, rc, err)
		return
	}
	src, err := s.lookup(srcBucket, srcKey)
	if err != nil || src.isDir {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified source key does not exist.")
		return
	}
	for _, h := range []string{"x-oss-copy-source-if-match", "x-amz-copy-source-if-match"} {
		if v := r.Header.Get(h); v != "" && !etagMatch(v, src.ETag) {
			s.writeError(w, r, rc, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
			return
		}
	}
	in, err := os.Open(src.path)
	if err != nil {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified source key does not exist.")
		return
	}
	defer in.Close()
	f, err := s.tempFile()
	if err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	m := src.meta
	if !m.HasCRC {
		hw := newHashWriter()
		_, err = io.Copy(io.MultiWriter(f, hw), in)
		m.CRC64, m.HasCRC = hw.crc.Sum64(), true
	} else {
		_, err = io.Copy(f, in)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	directive := r.Header.Get("x-oss-metadata-directive") + r.Header.Get("x-amz-metadata-directive")
	if strings.EqualFold(directive, "REPLACE") {
		m.CType, m.User = r.Header.Get("Content-Type"), userMeta(r.Header)
	}
	// As in the stores: the copy gets the ACL the request sets (none: the
	// default), and the source's tags unless the tagging directive is
	// REPLACE.
	m.ACL = acl
	if d := r.Header.Get("x-oss-tagging-directive") + r.Header.Get("x-amz-tagging-directive"); strings.EqualFold(d, "REPLACE") {
		m.Tags = tags
	}
	oi, ok := s.publishConditional(w, r, rc, f, m, excl)
	if !ok {
		return
	}
	w.Header().Set("x-oss-hash-crc64ecma", strconv.FormatUint(oi.CRC64, 10))
	s.writeXML(w, r, rc, http.StatusOK, copyResult{LastModified: isoTime(oi.mtime), ETag: `"` + oi.ETag + `"`})
}

type deleteRequest struct {
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key string `xml:"Key"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName      xml.Name    `xml:"DeleteResult"`
	EncodingType string      `xml:"EncodingType,omitempty"`
	Deleted      []deletedEl `xml:"Deleted"`
}

type deletedEl struct {
	Key string `xml:"Key"`
}

func (s *Server) handleDeleteMulti(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.beginInBucket(w, r, rc, "DeleteObjects") {
		return
	}
	var req deleteRequest
	if err := xml.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil {
		s.writeError(w, r, rc, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	enc := r.URL.Query().Get("encoding-type") == "url"
	out := deleteResult{}
	if enc {
		out.EncodingType = "url"
	}
	for _, o := range req.Objects {
		// encoding-type=url applies to the response only: request keys
		// are plain (XML-escaped) text.
		k := o.Key
		if err := s.deleteObject(rc.bucket, k); err != nil {
			s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		if !req.Quiet {
			out.Deleted = append(out.Deleted, deletedEl{Key: encodeKey(k, enc)})
		}
	}
	s.writeXML(w, r, rc, http.StatusOK, out)
}

// awsChunkedReader decodes the aws-chunked content encoding (SigV4
// streaming uploads): "<hex-size>[;chunk-signature=...]\r\n<data>\r\n",
// ending with a zero-size chunk and optional trailers. With sig set, each
// chunk's signature (the zero-size one included) is checked once its data
// is in: a bad one fails the read before EOF, so nothing is stored.
type awsChunkedReader struct {
	r    *bufio.Reader
	left int64
	done bool
	sig  *chunkSigning // nil: signatures not checked (unsigned or anonymous)
	h    hash.Hash     // SHA-256 of the current chunk's data
	cur  string        // the current chunk's signature

	trailer string    // the checksum trailer announced ("" when none)
	sum     hash.Hash // the trailer's checksum of all the data
	// signedTrailer: the trailers must carry x-amz-trailer-signature,
	// checked with sig (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER).
	signedTrailer bool
}

var errMalformedTrailer = &digestError{code: "MalformedTrailerError", msg: "The request contained trailing data that was not well-formed or did not conform to our published schema."}

// readTrailers reads the trailers after the last chunk, up to an empty
// line or EOF, checks the announced checksum and, for signed trailers,
// x-amz-trailer-signature: HMAC of "AWS4-HMAC-SHA256-TRAILER", the date,
// the scope, the final chunk's signature and the SHA-256 of the other
// trailers as "name:value\n" lines, in the order sent. It returns io.EOF
// when all is well.
func (c *awsChunkedReader) readTrailers() error {
	seen := false
	var canon strings.Builder
	var trailerSig string
	for {
		l, err := c.r.ReadString('\n')
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if k == "x-amz-trailer-signature" {
			trailerSig = v
		} else {
			canon.WriteString(k + ":" + v + "\n")
		}
		if c.sum != nil && k == c.trailer {
			seen = true
			if v != base64.StdEncoding.EncodeToString(c.sum.Sum(nil)) {
				alg := strings.ToUpper(strings.TrimPrefix(c.trailer, "x-amz-checksum-"))
				return &digestError{code: "BadDigest", msg: "The " + alg + " you specified did not match the calculated checksum."}
			}
		}
		if err != nil {
			break
		}
	}
	if c.sum != nil && !seen {
		return errMalformedTrailer
	}
	// Signed trailers: a missing signature is no better than a wrong one
	// (S3 refuses both).
	if c.signedTrailer && !c.sig.trailer(trailerSig, canon.String()) {
		return errChunkSignature
	}
	return io.EOF
}

// checksumAlgs are S3's additional checksums, by header suffix.
// CRC-64/NVME is the reflected polynomial 0x9a6c9329ac4bc9b5 with the
// initial value and final XOR all ones, which is how hash/crc64 computes
// any table ("123456789" sums to 0xae8b14860a799888).
var checksumAlgs = map[string]func() hash.Hash{
	"crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"crc32c":    func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"crc64nvme": func() hash.Hash { return crc64.New(crc64NVME) },
	"sha1":      sha1.New,
	"sha256":    sha256.New,
}

// checksumNames are checksumAlgs' names in a fixed order.
var checksumNames = []string{"crc32", "crc32c", "crc64nvme", "sha1", "sha256"}

var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

var errChunkSignature = &digestError{code: "SignatureDoesNotMatch",
	msg: "The request signature we calculated does not match the signature you provided. Check your key and signing method."}

func (c *awsChunkedReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		line, err := c.r.ReadString('\n')
		if err != nil {
			return 0, io.ErrUnexpectedEOF
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue // the CRLF after a chunk's data
		}
		sz, ext, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("aws-chunked: bad chunk header %q", line)
		}
		c.cur = strings.TrimPrefix(ext, "chunk-signature=")
		c.h.Reset()
		if n == 0 {
			c.done = true
			if c.sig != nil && !c.sig.next(c.cur, c.h.Sum(nil)) {
				return 0, errChunkSignature
			}
			return 0, c.readTrailers()
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	c.h.Write(p[:n])
	if c.sum != nil {
		c.sum.Write(p[:n])
	}
	if err == io.EOF && c.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if c.left == 0 && c.sig != nil && !c.sig.next(c.cur, c.h.Sum(nil)) {
		return n, errChunkSignature
	}
	return n, err
}

// requestedRange is the part of an object of size bytes a GET's Range
// header asks for, and the status of the reply: with ok false, the range
// could not be satisfied and the reply (416) is sent. A range OSS cannot
// satisfy is ignored (the whole object is sent) unless the request asks
// for the standard behaviour, as S3 clients always get.
func (s *Server) requestedRange(w http.ResponseWriter, r *http.Request, rc *reqCtx, size int64) (start, end int64, status int, ok bool) {
	start, end, status = 0, size-1, http.StatusOK
	if rv := r.Header.Get("Range"); rv != "" {
		st, en, present, satisfiable := parseRange(rv, size)
		standard := rc.s3 || strings.EqualFold(r.Header.Get("x-oss-range-behavior"), "standard")
		switch {
		case present && satisfiable:
			start, end, status = st, en, http.StatusPartialContent
		case present && standard:
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			s.writeError(w, r, rc, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range cannot be satisfied.")
			return 0, 0, 0, false
		}
	}
	return start, end, status, true
}

// startGetReply sends the headers of a GET or HEAD of bytes [start, end]
// of oi, and says whether a body is to follow: not for a HEAD or an empty
// body (a fault injected into a GET of no bytes cuts the connection).
func (s *Server) startGetReply(w http.ResponseWriter, r *http.Request, rc *reqCtx, oi objInfo, start, end int64, status int, head bool) bool {
	n := end - start + 1
	s.setObjectHeaders(w, rc, oi)
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if status == http.StatusPartialContent {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, oi.Size))
	}
	if head || n == 0 {
		if rc.fault != "" && !head {
			killConn(w, r, rc.fault, false)
			return false
		}
		w.WriteHeader(status)
		return false
	}
	return true
}
