package ossemu

import (
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SyntheticBucket is the bucket a Synthetic namespace fills unless it
// names another.
const SyntheticBucket = "synthetic"

// Synthetic describes a generated namespace: N objects whose names, sizes
// and contents are computed, not stored, so a bucket of ten million
// objects costs no disk and no memory per object. Object i is named
// "f<i>" (zero-padded to a fixed width, so names sort as the numbers do),
// under "d<i/FanOut>/" when FanOut is set. Every object has Size bytes;
// its bytes are SyntheticData's. The bucket is read-only: listings, GET
// and HEAD are served, and anything that would change it is refused with
// 403 AccessDenied.
type Synthetic struct {
	// Bucket is the bucket served; SyntheticBucket when empty. A directory
	// of that name under the root is created if missing, and its files
	// are not served.
	Bucket string
	// N is the number of objects.
	N int64
	// FanOut is the number of objects per directory; 0 puts them all at
	// the bucket's top.
	FanOut int64
	// Size is every object's size in bytes.
	Size int64
}

// syntheticTime is every synthetic object's modification time.
var syntheticTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// synthPatternSize is the length of the byte pattern object contents are
// windows of: object i starts at its own offset in it.
const synthPatternSize = 1 << 20

// synthSeed seeds the pattern: every emulator, and SyntheticData, generate
// the same bytes.
const synthSeed = 0x6d6c667364

// synth serves a Synthetic namespace.
type synth struct {
	Synthetic
	fileWidth, dirWidth int
	pattern             []byte
}

func newSynth(s Synthetic) (*synth, error) {
	if s.Bucket == "" {
		s.Bucket = SyntheticBucket
	}
	switch {
	case !checkBucket(s.Bucket):
		return nil, fmt.Errorf("synthetic bucket %q: not a valid bucket name", s.Bucket)
	case s.N <= 0:
		return nil, fmt.Errorf("synthetic namespace of %d objects: want at least 1", s.N)
	case s.FanOut < 0:
		return nil, fmt.Errorf("synthetic fan-out %d: want 0 (one flat directory) or the objects per directory", s.FanOut)
	case s.Size < 0:
		return nil, fmt.Errorf("synthetic object size %d: must not be negative", s.Size)
	}
	g := &synth{Synthetic: s, fileWidth: len(strconv.FormatInt(s.N-1, 10)), pattern: synthPattern()}
	if s.FanOut > 0 {
		g.dirWidth = len(strconv.FormatInt((s.N-1)/s.FanOut, 10))
	}
	return g, nil
}

func synthPattern() []byte {
	p := make([]byte, synthPatternSize)
	rng := mrand.New(mrand.NewPCG(synthSeed, synthSeed))
	for i := 0; i < len(p); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	return p
}

// SyntheticKey is the key of object i of the namespace s describes.
func SyntheticKey(s Synthetic, i int64) string {
	g := &synth{Synthetic: s, fileWidth: len(strconv.FormatInt(s.N-1, 10))}
	if s.FanOut > 0 {
		g.dirWidth = len(strconv.FormatInt((s.N-1)/s.FanOut, 10))
	}
	return g.key(i)
}

// SyntheticData fills p with the bytes of object i at offset off, as the
// emulator serves them (the caller keeps within the object's size).
func SyntheticData(i int64, p []byte, off int64) {
	synthFill(synthPattern(), i, p, off)
}

func synthFill(pattern []byte, i int64, p []byte, off int64) {
	pos := int((uint64(i)*4099 + uint64(off)) % synthPatternSize)
	for n := 0; n < len(p); {
		c := copy(p[n:], pattern[pos:])
		n += c
		pos = 0
	}
}

func (g *synth) key(i int64) string {
	if g.FanOut > 0 {
		return fmt.Sprintf("d%0*d/f%0*d", g.dirWidth, i/g.FanOut, g.fileWidth, i)
	}
	return fmt.Sprintf("f%0*d", g.fileWidth, i)
}

// index returns the object a key names, or -1.
func (g *synth) index(key string) int64 {
	rest := key
	dir := int64(-1)
	if g.FanOut > 0 {
		d, r, ok := strings.Cut(key, "/")
		if !ok || len(d) != 1+g.dirWidth || d[0] != 'd' {
			return -1
		}
		n, err := strconv.ParseInt(d[1:], 10, 64)
		if err != nil {
			return -1
		}
		dir, rest = n, r
	}
	if len(rest) != 1+g.fileWidth || rest[0] != 'f' || strings.ContainsAny(rest[1:], "+-") {
		return -1
	}
	i, err := strconv.ParseInt(rest[1:], 10, 64)
	if err != nil || i < 0 || i >= g.N || (dir >= 0 && i/g.FanOut != dir) {
		return -1
	}
	return i
}

// search returns the first object whose key satisfies f, which holds of
// every key after one it holds of (keys sort as their indexes).
func (g *synth) search(f func(key string) bool) int64 {
	return int64(sort.Search(int(g.N), func(i int) bool { return f(g.key(int64(i))) }))
}

// list lists the namespace as ListObjects does (see Server.list): a
// binary search to the first key after the marker and at the prefix, then
// one step per key listed, and one binary search per common prefix to
// the key after it, whatever the namespace's size.
func (g *synth) list(prefix, delimiter, marker string, maxKeys int) listResult {
	var res listResult
	count := 0
	i := g.search(func(k string) bool { return k > marker && k >= prefix })
	for i < g.N {
		k := g.key(i)
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if delimiter != "" {
			if j := strings.Index(k[len(prefix):], delimiter); j >= 0 {
				cp := k[:len(prefix)+j+len(delimiter)]
				if cp > marker {
					if count == maxKeys {
						res.truncated = true
						break
					}
					count++
					res.prefixes = append(res.prefixes, cp)
					res.next = cp
				}
				i = g.search(func(k string) bool { return k >= cp && !strings.HasPrefix(k, cp) })
				continue
			}
		}
		if count == maxKeys {
			res.truncated = true
			break
		}
		count++
		res.objects = append(res.objects, listEntry{key: k, size: g.Size, mtime: syntheticTime, etag: g.etag(i)})
		res.next = k
		i++
	}
	if !res.truncated {
		res.next = ""
	}
	return res
}

func (g *synth) etag(i int64) string {
	x := uint64(i)*0x9e3779b97f4a7c15 + uint64(g.Size)
	x ^= x >> 31
	return fmt.Sprintf("%016X%016X", x, x*0xbf58476d1ce4e5b9)
}

// errSyntheticReadOnly refuses a change to a synthetic bucket.
var errSyntheticReadOnly = errors.New("the synthetic bucket is read-only")

// serveSynthetic serves a request for the synthetic bucket: a listing,
// HEAD of the bucket, or GET or HEAD of an object. Anything else (a
// change, bucket configuration, uploads) is refused.
func (s *Server) serveSynthetic(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	g := s.synth
	q := r.URL.Query()
	switch {
	case rc.key == "" && r.Method == http.MethodGet && isListQuery(q):
		s.handleList(w, r, rc)
	case rc.key == "" && r.Method == http.MethodHead:
		rc.op = "HeadBucket"
		s.count(rc.op)
		w.WriteHeader(http.StatusOK)
	case rc.key != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && len(q) == 0:
		s.handleSyntheticGet(w, r, rc, g)
	default:
		s.count("Refused")
		s.writeError(w, r, rc, http.StatusForbidden, "AccessDenied", errSyntheticReadOnly.Error())
	}
}

// isListQuery reports whether a bucket GET's query asks for a listing.
func isListQuery(q map[string][]string) bool {
	for k := range q {
		switch k {
		case "prefix", "delimiter", "marker", "max-keys", "list-type", "start-after", "continuation-token", "encoding-type", "fetch-owner":
		default:
			return false
		}
	}
	return true
}

func (s *Server) handleSyntheticGet(w http.ResponseWriter, r *http.Request, rc *reqCtx, g *synth) {
	head := r.Method == http.MethodHead
	rc.op = "GetObject"
	if head {
		rc.op = "HeadObject"
	}
	s.count(rc.op)
	i := g.index(rc.key)
	if i < 0 {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		return
	}
	oi := objInfo{meta: meta{Size: g.Size, MtimeNs: syntheticTime.UnixNano(), ETag: g.etag(i)}, mtime: syntheticTime}
	if im := r.Header.Get("If-Match"); im != "" && !etagMatch(im, oi.ETag) {
		s.writeError(w, r, rc, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
		return
	}
	start, end, status, ok := s.requestedRange(w, r, rc, oi.Size)
	if !ok {
		return
	}
	n := end - start + 1
	if !s.startGetReply(w, r, rc, oi, start, end, status, head) {
		return
	}
	w.WriteHeader(status)
	limit := n
	if rc.fault != "" {
		limit = s.cutoff(n)
	}
	sent, err := io.Copy(bodyWriter(w, r), &synthReader{g: g, i: i, off: start, end: start + limit})
	s.add("bytes.out", sent)
	if rc.fault != "" {
		killConn(w, r, rc.fault, true)
		return
	}
	if err != nil {
		killConn(w, r, FaultReset, true)
	}
}

// synthReader reads object i's bytes from off to end.
type synthReader struct {
	g        *synth
	i        int64
	off, end int64
}

func (r *synthReader) Read(p []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.end-r.off)]
	synthFill(r.g.pattern, r.i, p, r.off)
	r.off += int64(len(p))
	return len(p), nil
}
