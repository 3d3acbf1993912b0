// Package ossemu serves a local directory over the OSS REST protocol, well
// enough for the aliyun-oss-go-sdk, and over the S3 REST protocol,
// well enough for rclone, s3fs and boto3, so peers can be measured
// against the very same data.
//
// Each top-level directory of the root is a bucket and each object a plain
// file under it, so data can be seeded and checked with ordinary file tools.
// Objects stream from and to disk: memory use does not grow with object
// size. Options inject latency (time to first byte), per-connection
// bandwidth limits and failures (5xx, connection resets, truncated bodies).
//
// Requests must be signed (OSS V1 or V4, S3 V2 or V4, in the Authorization
// header or a presigned URL) with the configured key pair, as a private
// bucket demands: see Options.AccessKeyID and Options.Anonymous. A browser
// form upload (PostObject) carries its signature in the form instead: the
// signed policy and its conditions are checked (postobject.go). Buckets
// are addressed path-style (host/bucket/key) or virtual-hosted-style
// (bucket.host/key, see Options.VirtualHosts).
package ossemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/backends/dirindex"
)

// Options configures a Server.
type Options struct {
	// TTFB delays every response by this long before its first byte.
	TTFB time.Duration
	// ConnBandwidth limits each connection to this many bytes per second
	// in each direction; 0 means unlimited.
	ConnBandwidth int64
	// ErrorRate is the probability (0..1) that a request fails with one of
	// ErrorKinds (all kinds when empty).
	ErrorRate  float64
	ErrorKinds []FaultKind
	// Seed seeds the fault generator, so a run can be repeated.
	Seed uint64
	// AccessKeyID and AccessKeySecret are the key pair requests must be
	// signed with (OSS V1 or V4, S3 V2 or V4); a request unsigned, signed
	// with another key or signed wrongly is refused with 403 and the code
	// the real store uses (AccessDenied, InvalidAccessKeyId,
	// SignatureDoesNotMatch). Both empty means DefaultAccessKeyID and
	// DefaultAccessKeySecret.
	AccessKeyID, AccessKeySecret string
	// Keys are further key pairs requests may be signed with, each doing
	// only what its rules allow (access.go); the key above may do anything.
	Keys []Key
	// Anonymous accepts any request, signed or not, with any key (unless
	// AccessKeyID is set: then the key id must still match).
	Anonymous bool
	// VirtualHosts are the host names (without port) under which a bucket
	// is addressed virtual-hosted style, as BUCKET.NAME (what rclone's
	// Alibaba provider and the SDKs without path style send). "localhost"
	// when empty. BUCKET.IP (e.g. bkt.127.0.0.1:9000) is always understood.
	VirtualHosts []string
	// STSDuration is the lifetime of the keys the STS endpoints (sts.go)
	// and the metadata endpoints (metadata.go) issue; a caller asking for
	// less gets less. DefaultSTSDuration when zero. Requests signed with an
	// issued key after it expired are refused with the store's own error
	// (OSS: 403 SecurityTokenExpired; S3: 400 ExpiredToken).
	STSDuration time.Duration
	// STSRoles are the role ARNs STS lets be assumed; empty allows any
	// well-formed one (acs:ram::ACCOUNT:role/NAME, arn:aws:iam::ACCOUNT:role/NAME).
	STSRoles []string
	// Synthetic, when set, serves a generated namespace in its bucket
	// instead of files (see Synthetic).
	Synthetic *Synthetic
	// Log receives one line per failed request at debug level (and the
	// server's own errors). Nil discards.
	Log *slog.Logger
}

// StatsPath is the HTTP path at which the server reports Stats as JSON.
const StatsPath = "/_mlfsd/stats"

// Server is the emulator. It implements http.Handler; use Serve to serve a
// listener with per-connection bandwidth limits and fault injection.
type Server struct {
	root       string
	opt        Options
	log        *slog.Logger
	crcFlight  singleflight.Group
	hashFlight singleflight.Group // hashing of seeded files, by path, size and mtime
	// appendMu serializes appends, and orders them with the recording of
	// a seeded file's hash (see statMeta). Lock order: appendMu, then mu.
	appendMu sync.Mutex
	// bucketMu serializes updates of bucket records (acl.go).
	bucketMu sync.Mutex
	reqSeq   atomic.Uint64
	// dirs indexes wide directories for paged listings.
	dirs *dirindex.Cache
	// synth serves Options.Synthetic; nil without one.
	synth *synth

	mu      sync.Mutex // guards the fields below
	stats   map[string]int64
	hashed  map[string]meta // records of seeded files whose xattr cannot be written
	rng     *mrand.Rand
	errRate float64
	kinds   []FaultKind
	// ca signs the TLS certificates of tunnelled connections (metadata.go).
	ca tlsAuthority
	// tempKeys are the keys STS and the metadata endpoints issued, by id.
	tempKeys map[string]TempKey
}

// New returns a server for the directory root, which must exist and live on
// a filesystem with user extended attributes (ext4, xfs, btrfs, tmpfs).
func New(root string, opt Options) (*Server, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("emulator root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("emulator root %s is not a directory", abs)
	}
	if opt.ErrorRate < 0 || opt.ErrorRate > 1 {
		return nil, fmt.Errorf("error rate %v: want a value from 0 to 1", opt.ErrorRate)
	}
	if opt.ConnBandwidth < 0 || opt.TTFB < 0 {
		return nil, errors.New("bandwidth and time to first byte must not be negative")
	}
	for _, d := range []string{"tmp", "uploads"} {
		if err := os.MkdirAll(filepath.Join(abs, internalDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("emulator root: %w", err)
		}
	}
	probe := filepath.Join(abs, internalDir, "tmp", "xattr-probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		return nil, fmt.Errorf("emulator root: %w", err)
	}
	err = unix.Setxattr(probe, xattrMeta, []byte("{}"), 0)
	os.Remove(probe)
	if err != nil {
		return nil, fmt.Errorf("emulator root %s: the filesystem does not support user extended attributes (%v); use a directory on ext4, xfs, btrfs or tmpfs", abs, err)
	}
	switch {
	case opt.AccessKeyID == "" && opt.AccessKeySecret == "" && !opt.Anonymous:
		opt.AccessKeyID, opt.AccessKeySecret = DefaultAccessKeyID, DefaultAccessKeySecret
	case opt.AccessKeySecret == "" && !opt.Anonymous:
		return nil, fmt.Errorf("access key id %q has no secret: set both, or neither for the default pair, or accept anonymous requests", opt.AccessKeyID)
	case opt.AccessKeyID == "" && opt.AccessKeySecret != "":
		return nil, errors.New("an access key secret was given without its access key id")
	}
	if err := checkKeys(opt.Keys, opt.AccessKeyID); err != nil {
		return nil, err
	}
	var g *synth
	if opt.Synthetic != nil {
		if g, err = newSynth(*opt.Synthetic); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(abs, g.Bucket), 0o755); err != nil {
			return nil, fmt.Errorf("emulator root: %w", err)
		}
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kinds := opt.ErrorKinds
	if len(kinds) == 0 {
		kinds = AllFaultKinds()
	}
	return &Server{
		root: abs, opt: opt, log: log,
		stats:   map[string]int64{},
		hashed:  map[string]meta{},
		dirs:    dirindex.New(dirKeyOrder),
		synth:   g,
		rng:     mrand.New(mrand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
		errRate: opt.ErrorRate,
		kinds:   kinds,

		tempKeys: map[string]TempKey{},
	}, nil
}

// Root returns the directory served.
func (s *Server) Root() string { return s.root }

// SetFaults changes the error rate and kinds at run time (tests use it to
// make a store fail after seeding it). Empty kinds means all kinds.
func (s *Server) SetFaults(rate float64, kinds ...FaultKind) {
	if len(kinds) == 0 {
		kinds = AllFaultKinds()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errRate, s.kinds = rate, kinds
}

// Stats returns a snapshot of the request counters: one per operation
// ("GetObject", "HeadObject", "ListObjects", "PutObject", "UploadPart", ...),
// "fault.<kind>" per injected failure, and "bytes.out"/"bytes.in" for
// object data sent and received.
func (s *Server) Stats() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.stats))
	for k, v := range s.stats {
		out[k] = v
	}
	return out
}

func (s *Server) add(name string, n int64) {
	s.mu.Lock()
	s.stats[name] += n
	s.mu.Unlock()
}

func (s *Server) count(op string) { s.add(op, 1) }

// begin names the request's operation (for its log line and its errors)
// and counts it.
func (s *Server) begin(rc *reqCtx, op string) {
	rc.op = op
	s.count(op)
}

// beginInBucket is begin for an operation on a bucket, which it answers
// with NoSuchBucket (and false) when the bucket does not exist.
func (s *Server) beginInBucket(w http.ResponseWriter, r *http.Request, rc *reqCtx, op string) bool {
	s.begin(rc, op)
	if !s.bucketExists(rc.bucket) {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
		return false
	}
	return true
}

// Serve serves l until ctx is cancelled, then shuts down gracefully
// (waiting up to 5s for requests in flight) and returns nil.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	// Connections that have not sent a request yet (clients dial ahead)
	// would hold Shutdown for 5s: they are closed at once instead.
	var mu sync.Mutex
	fresh := map[net.Conn]bool{}
	hs := &http.Server{
		Handler:           s,
		ConnContext:       s.connContext,
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState: func(c net.Conn, st http.ConnState) {
			mu.Lock()
			defer mu.Unlock()
			if st == http.StateNew {
				fresh[c] = true
			} else {
				delete(fresh, c)
			}
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- hs.Shutdown(sctx) }()
		mu.Lock()
		for c := range fresh {
			c.Close()
		}
		mu.Unlock()
		if err := <-shut; err != nil {
			hs.Close()
		}
		<-errc
		return nil
	}
}

// reqCtx is what one request's handlers share.
type reqCtx struct {
	op     string
	bucket string
	key    string
	s3     bool   // the client speaks S3 (x-amz-* headers) rather than OSS
	vhost  bool   // the bucket came from the Host header (virtual-hosted style)
	id     string // request id
	fault  FaultKind
	// chunks verifies a streaming SigV4 body's chunk signatures; nil
	// unless the request is one (set by authenticate).
	chunks *chunkSigning
	// ruled is the key the request was signed with when that key has
	// rules (access.go); nil for the primary key (set by authenticate).
	ruled *Key
}

func (s *Server) newRequestID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%016X%s", s.reqSeq.Add(1), strings.ToUpper(hex.EncodeToString(b[:])))
}

// hostBucket returns the bucket a virtual-hosted-style Host header names,
// or "" for a path-style request.
func (s *Server) hostBucket(host string) string {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if net.ParseIP(h) != nil {
		return ""
	}
	bases := s.opt.VirtualHosts
	if len(bases) == 0 {
		bases = []string{"localhost"}
	}
	for i := 0; i < len(h); i++ {
		if h[i] != '.' || i == 0 {
			continue
		}
		rest := h[i+1:]
		if net.ParseIP(rest) != nil {
			return h[:i]
		}
		for _, base := range bases {
			if strings.EqualFold(rest, base) {
				return h[:i]
			}
		}
	}
	return ""
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == StatsPath && r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
		return
	}
	if r.ContentLength == 0 && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// net/http sends "100 Continue" only once a handler reads a
		// non-empty body; S3 sends it for an empty one too, and botocore
		// (which waits for it) otherwise mis-reads the final response and
		// its next request on the connection hangs for its read timeout.
		w.WriteHeader(http.StatusContinue)
	}
	rc := &reqCtx{id: s.newRequestID()}
	h := w.Header()
	h.Set("x-oss-request-id", rc.id)
	h.Set("x-amz-request-id", rc.id)
	h.Set("Server", "ossemu")
	s.count("requests")

	if isSTS(r) && s.hostBucket(r.Host) == "" {
		s.serveSTS(w, r, rc.id)
		return
	}
	if b := s.hostBucket(r.Host); b != "" {
		rc.bucket, rc.key, rc.vhost = b, strings.TrimPrefix(r.URL.Path, "/"), true
	} else if p := strings.TrimPrefix(r.URL.Path, "/"); p != "" {
		rc.bucket, rc.key, _ = strings.Cut(p, "/")
	}
	if e := s.authenticate(r, rc); e != nil {
		s.count("AuthFailed")
		s.writeError(w, r, rc, e.status, e.code, e.msg)
		return
	}
	if s.authorize(r, rc) != nil {
		s.refuse(w, r, rc)
		return
	}
	if d := s.opt.TTFB; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch f := s.pickFault(); f {
	case Fault500:
		s.add("fault.500", 1)
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", "injected fault")
		return
	case Fault503:
		s.add("fault.503", 1)
		s.writeError(w, r, rc, http.StatusServiceUnavailable, "SlowDown", "injected fault: please reduce your request rate")
		return
	case FaultReset, FaultTruncate:
		s.add("fault."+string(f), 1)
		if r.Method != http.MethodGet {
			// Requests that change state fail before they take effect,
			// once their body is in (see drainBody).
			drainBody(r)
			killConn(w, r, FaultReset, false)
			return
		}
		rc.fault = f
	}
	s.route(w, r, rc)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	q := r.URL.Query()
	if rc.bucket == "" {
		if r.Method == http.MethodGet {
			s.handleListBuckets(w, r, rc)
			return
		}
		s.methodNotAllowed(w, r, rc)
		return
	}
	if !checkBucket(rc.bucket) {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid.")
		return
	}
	if s.synth != nil && rc.bucket == s.synth.Bucket {
		s.serveSynthetic(w, r, rc)
		return
	}
	if rc.key == "" {
		switch r.Method {
		case http.MethodGet:
			switch {
			case q.Has("location"):
				s.handleLocation(w, r, rc)
			case q.Has("uploads"):
				s.handleListUploads(w, r, rc)
			case q.Has("acl"), q.Has("versioning"), q.Has("tagging"), q.Has("policy"), q.Has("lifecycle"), q.Has("cors"):
				s.handleBucketConfig(w, r, rc, q)
			case q.Has("bucketInfo") && !rc.s3:
				s.handleBucketInfo(w, r, rc)
			case q.Has("stat") && !rc.s3:
				s.handleBucketStat(w, r, rc)
			default:
				s.handleList(w, r, rc)
			}
		case http.MethodHead:
			if !s.beginInBucket(w, r, rc, "HeadBucket") {
				return
			}
			w.WriteHeader(http.StatusOK)
		case http.MethodPut:
			if q.Has("acl") || q.Has("tagging") {
				s.handlePutBucketConfig(w, r, rc, q)
				return
			}
			s.begin(rc, "PutBucket")
			acl, err := requestACL(r, rc, true)
			if err != nil {
				s.badHeader(w, r, rc, err)
				return
			}
			if err := os.Mkdir(s.bucketPath(rc.bucket), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
				return
			}
			if acl != "" {
				if err := s.updateBucketMeta(rc.bucket, func(bm *bucketMeta) { bm.ACL = acl }); err != nil {
					s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
					return
				}
			}
			w.WriteHeader(http.StatusOK)
		case http.MethodDelete:
			if q.Has("tagging") {
				s.handleDeleteBucketTagging(w, r, rc)
				return
			}
			if !s.beginInBucket(w, r, rc, "DeleteBucket") {
				return
			}
			if err := os.Remove(s.bucketPath(rc.bucket)); err != nil {
				s.writeError(w, r, rc, http.StatusConflict, "BucketNotEmpty", "The bucket you tried to delete is not empty.")
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPost:
			if q.Has("delete") {
				s.handleDeleteMulti(w, r, rc)
				return
			}
			if isFormData(r) {
				s.handlePostObject(w, r, rc) // PostObject (browser form upload)
				return
			}
			s.methodNotAllowed(w, r, rc)
		default:
			s.methodNotAllowed(w, r, rc)
		}
		return
	}
	if !s.bucketExists(rc.bucket) {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if q.Has("symlink") && r.Method == http.MethodGet {
			s.handleGetSymlink(w, r, rc)
			return
		}
		if q.Has("uploadId") && r.Method == http.MethodGet {
			s.handleListParts(w, r, rc)
			return
		}
		if (q.Has("acl") || q.Has("tagging")) && r.Method == http.MethodGet {
			s.handleObjectConfig(w, r, rc, q)
			return
		}
		if r.Method == http.MethodHead && (q.Has("acl") || q.Has("tagging") || q.Has("symlink")) {
			s.methodNotAllowed(w, r, rc)
			return
		}
		s.handleGet(w, r, rc)
	case http.MethodPut:
		switch {
		case q.Has("uploadId"):
			s.handleUploadPart(w, r, rc)
		case q.Has("symlink"):
			s.handlePutSymlink(w, r, rc)
		case q.Has("acl"):
			s.handlePutObjectACL(w, r, rc)
		case q.Has("tagging"):
			s.handlePutObjectTagging(w, r, rc)
		case s.copySource(r, rc) != "":
			s.handleCopy(w, r, rc)
		default:
			s.handlePut(w, r, rc)
		}
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			s.handleInitiate(w, r, rc)
		case q.Has("uploadId"):
			s.handleComplete(w, r, rc)
		case q.Has("append") && !rc.s3:
			s.handleAppend(w, r, rc)
		default:
			s.methodNotAllowed(w, r, rc)
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			s.handleAbort(w, r, rc)
			return
		}
		if q.Has("tagging") {
			s.handleDeleteObjectTagging(w, r, rc)
			return
		}
		s.begin(rc, "DeleteObject")
		if err := s.deleteObject(rc.bucket, rc.key); err != nil {
			s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		s.methodNotAllowed(w, r, rc)
	}
}

type xmlError struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	RequestID string   `xml:"RequestId"`
	HostID    string   `xml:"HostId"`
	Key       string   `xml:"Key,omitempty"`
	Bucket    string   `xml:"BucketName,omitempty"`
}

// drainBody reads what is left of a request body. Answering before the
// client has sent its whole body is legal HTTP, but the aliyun SDK then reads
// its progress counter while net/http's writer goroutine still updates it
// (a data race inside the SDK that -race reports): the emulator answers
// only once the body is in.
func drainBody(r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, rc *reqCtx, status int, code, msg string) {
	s.log.Debug("ossemu request failed", "method", r.Method, "path", r.URL.Path, "status", status, "code", code, "msg", msg)
	drainBody(r)
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	rc.fault = "" // errors are not truncated
	s.writeXML(w, r, rc, status, xmlError{Code: code, Message: msg, RequestID: rc.id, HostID: r.Host, Key: rc.key, Bucket: rc.bucket})
}

// methodNotAllowed answers a request the stores do not define (a method,
// or a POST without a known sub-resource) as they do.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.count("MethodNotAllowed")
	w.Header().Set("Allow", "GET, HEAD, PUT, POST, DELETE")
	s.writeError(w, r, rc, http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
}

type xmlACL struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Owner   owner    `xml:"Owner"`
	Grant   string   `xml:"AccessControlList>Grant"`
}

type xmlVersioning struct {
	XMLName xml.Name `xml:"VersioningConfiguration"`
}

// handleBucketConfig answers reads of bucket settings: the ACL and tags
// set (acl.go; a new bucket's are private and none), versioning never
// enabled, and
// no lifecycle, CORS or policy (404 with the store's code).
func (s *Server) handleBucketConfig(w http.ResponseWriter, r *http.Request, rc *reqCtx, q url.Values) {
	if !s.beginInBucket(w, r, rc, "GetBucketConfig") {
		return
	}
	switch {
	case q.Has("acl") && rc.s3:
		s.writeXML(w, r, rc, http.StatusOK, s3ACL(s.bucketACL(rc.bucket)))
	case q.Has("acl"):
		s.writeXML(w, r, rc, http.StatusOK, xmlACL{Owner: owner{ID: "ossemu", DisplayName: "ossemu"}, Grant: s.bucketACL(rc.bucket)})
	case q.Has("tagging"):
		s.writeXML(w, r, rc, http.StatusOK, xmlTagSet{Tags: s.readBucketMeta(rc.bucket).Tags})
	case q.Has("versioning"):
		s.writeXML(w, r, rc, http.StatusOK, xmlVersioning{})
	case q.Has("lifecycle"):
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchLifecycle", "No Row found in Lifecycle Table.")
	case q.Has("cors"):
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchCORSConfiguration", "The CORS configuration does not exist.")
	case q.Has("policy"):
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucketPolicy", "The bucket policy does not exist.")
	}
}

// handleObjectConfig answers reads of an object's ACL (unless set, OSS:
// "default", inherited from the bucket) and tags.
func (s *Server) handleObjectConfig(w http.ResponseWriter, r *http.Request, rc *reqCtx, q url.Values) {
	s.begin(rc, "GetObjectConfig")
	oi, err := s.lookupRaw(rc.bucket, rc.key)
	if err != nil || oi.isDir != strings.HasSuffix(rc.key, "/") {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	if q.Has("acl") {
		grant := oi.ACL
		if rc.s3 {
			s.writeXML(w, r, rc, http.StatusOK, s3ACL(grant))
			return
		}
		if grant == "" {
			grant = "default"
		}
		s.writeXML(w, r, rc, http.StatusOK, xmlACL{Owner: owner{ID: "ossemu", DisplayName: "ossemu"}, Grant: grant})
		return
	}
	s.writeXML(w, r, rc, http.StatusOK, xmlTagSet{Tags: oi.Tags})
}

// writeXML sends v as an XML document; an injected mid-body fault cuts it.
func (s *Server) writeXML(w http.ResponseWriter, r *http.Request, rc *reqCtx, status int, v any) {
	body, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append([]byte(xml.Header), body...)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if rc.fault != "" {
		_, _ = w.Write(body[:len(body)/2])
		killConn(w, r, rc.fault, true)
		return
	}
	_, _ = w.Write(body)
}

type listAllMyBuckets struct {
	XMLName xml.Name    `xml:"ListAllMyBucketsResult"`
	Owner   owner       `xml:"Owner"`
	Buckets []xmlBucket `xml:"Buckets>Bucket"`
}

type xmlBucket struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
	Location     string `xml:"Location,omitempty"`
}

func (s *Server) handleListBuckets(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "ListBuckets")
	des, err := os.ReadDir(s.root)
	if err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	out := listAllMyBuckets{Owner: owner{ID: "ossemu", DisplayName: "ossemu"}}
	for _, de := range des {
		if !de.IsDir() || !checkBucket(de.Name()) {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		out.Buckets = append(out.Buckets, xmlBucket{Name: de.Name(), CreationDate: isoTime(fi.ModTime()), Location: "oss-local"})
	}
	s.writeXML(w, r, rc, http.StatusOK, out)
}

type locationConstraint struct {
	XMLName xml.Name `xml:"LocationConstraint"`
	Value   string   `xml:",chardata"`
}

func (s *Server) handleLocation(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.beginInBucket(w, r, rc, "GetBucketLocation") {
		return
	}
	v := "oss-local"
	if rc.s3 {
		v = "" // us-east-1
	}
	s.writeXML(w, r, rc, http.StatusOK, locationConstraint{Value: v})
}
