package ossemu

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// listEntry is one key met while walking a bucket in key order.
type listEntry struct {
	key   string
	size  int64
	mtime time.Time
	etag  string
	multi bool
	link  bool // a symlink object
	app   bool // appendable
}

// errStopWalk ends a walk early.
type stopWalk struct{}

func (stopWalk) Error() string { return "stop" }

// walker visits the keys of a bucket in ascending byte order, starting after
// marker and restricted to prefix. A directory whose key ("d/") would be
// folded into a common prefix is reported through onDir instead of being
// descended, which keeps delimiter listings of wide trees cheap.
type walker struct {
	s      *Server
	bucket string
	prefix string
	marker string
	// onDir returns true when the walker should not descend into dk
	// (the caller has reported it as a common prefix).
	onDir func(dk string) (skip bool, err error)
	onKey func(e listEntry) error
}

func (w *walker) run() error {
	// Start at the deepest directory the prefix names.
	dirKey := w.prefix[:strings.LastIndexByte(w.prefix, '/')+1]
	if dirKey != "" && checkKey(dirKey) != nil {
		return nil
	}
	dir := filepath.Join(w.s.bucketPath(w.bucket), filepath.FromSlash(strings.TrimSuffix(dirKey, "/")))
	var err error
	if dirKey != "" && dirKey == w.prefix && dirKey > w.marker {
		// The prefix names a directory: its own marker comes first.
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() && (isMarker(dir) || dirEmpty(dir)) {
			err = w.onKey(listEntry{key: dirKey, mtime: fi.ModTime(), etag: emptyMD5})
		}
	}
	if err == nil {
		err = w.walkDir(dir, dirKey)
	}
	if _, ok := err.(stopWalk); ok {
		return nil
	}
	return err
}

// dirKeyOrder orders a directory's entries as their keys sort: a
// directory as "name/".
func dirKeyOrder(name string, isDir bool) string {
	if isDir {
		return name + "/"
	}
	return name
}

func (w *walker) walkDir(dir, dirKey string) error {
	all, ok := w.s.dirs.Entries(dir)
	if !ok {
		return nil // vanished or not a directory: nothing under it
	}
	// Start at the first entry after the marker (or the directory the
	// marker lies in) and at or after the prefix: a page costs a binary
	// search, not a scan of the directory.
	from := sort.Search(len(all), func(i int) bool { return dirKey+all[i].Key > w.marker })
	if from > 0 && all[from-1].IsDir && strings.HasPrefix(w.marker, dirKey+all[from-1].Key) {
		from--
	}
	from = max(from, sort.Search(len(all), func(i int) bool { return dirKey+all[i].Key >= w.prefix }))
	ents := all[from:]
	for _, e := range ents {
		k := dirKey + e.Key
		if k > w.prefix && !strings.HasPrefix(k, w.prefix) {
			return nil // past the prefix: so is every entry after
		}
		p := filepath.Join(dir, e.Name)
		if !e.IsDir {
			if k <= w.marker || !strings.HasPrefix(k, w.prefix) {
				continue
			}
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			m := w.s.statMeta(p, fi)
			if err := w.onKey(listEntry{key: k, size: m.Size, mtime: fi.ModTime(), etag: m.ETag, multi: m.Multipart, app: m.Appendable, link: m.Symlink != ""}); err != nil {
				return err
			}
			continue
		}
		// Directory "k" (ends with '/'): skip when entirely at or before
		// the marker, or unrelated to the prefix.
		if k < w.marker && !strings.HasPrefix(w.marker, k) {
			continue
		}
		if !strings.HasPrefix(k, w.prefix) && !strings.HasPrefix(w.prefix, k) {
			continue
		}
		if strings.HasPrefix(k, w.prefix) && w.onDir != nil {
			skip, err := w.onDir(k)
			if err != nil {
				return err
			}
			if skip {
				continue
			}
		}
		if strings.HasPrefix(k, w.prefix) && k > w.marker && (isMarker(p) || dirEmpty(p)) {
			fi, err := os.Stat(p)
			if err == nil {
				if err := w.onKey(listEntry{key: k, mtime: fi.ModTime(), etag: emptyMD5}); err != nil {
					return err
				}
			}
		}
		if err := w.walkDir(p, k); err != nil {
			return err
		}
	}
	return nil
}

// listResult is a page of a listing, before encoding.
type listResult struct {
	objects   []listEntry
	prefixes  []string
	truncated bool
	next      string // last key or prefix returned, when truncated
}

// list lists a bucket the way ListObjects does.
func (s *Server) list(bucket, prefix, delimiter, marker string, maxKeys int) (listResult, error) {
	var res listResult
	count := 0
	lastCP := ""
	add := func(key string, e *listEntry) error {
		if count == maxKeys {
			res.truncated = true
			return stopWalk{}
		}
		count++
		res.next = key
		if e != nil {
			res.objects = append(res.objects, *e)
		} else {
			res.prefixes = append(res.prefixes, key)
			lastCP = key
		}
		return nil
	}
	// commonPrefix returns the common prefix key folds into, or "".
	commonPrefix := func(key string) string {
		if delimiter == "" {
			return ""
		}
		rest := key[len(prefix):]
		if i := strings.Index(rest, delimiter); i >= 0 {
			return prefix + rest[:i+len(delimiter)]
		}
		return ""
	}
	w := &walker{s: s, bucket: bucket, prefix: prefix, marker: marker}
	w.onKey = func(e listEntry) error {
		if cp := commonPrefix(e.key); cp != "" {
			if cp == lastCP || cp <= marker {
				return nil
			}
			return add(cp, nil)
		}
		return add(e.key, &e)
	}
	if delimiter == "/" {
		w.onDir = func(dk string) (bool, error) {
			cp := commonPrefix(dk)
			if cp == "" {
				return false, nil
			}
			if cp != dk {
				// dk lies deeper than the first delimiter: already folded.
				return true, nil
			}
			if cp == lastCP || cp <= marker {
				return true, nil
			}
			// Every directory holds at least one key (a file, or an
			// empty directory that is a marker), so the prefix is real.
			return true, add(cp, nil)
		}
	}
	if err := w.run(); err != nil {
		return listResult{}, err
	}
	if !res.truncated {
		res.next = ""
	}
	return res, nil
}

// XML shapes shared by OSS and S3.
type xmlContents struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Type         string `xml:"Type,omitempty"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
	Owner        *owner `xml:"Owner,omitempty"`
}

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

type xmlPrefix struct {
	Prefix string `xml:"Prefix"`
}

type listV1Result struct {
	XMLName        xml.Name      `xml:"ListBucketResult"`
	Name           string        `xml:"Name"`
	Prefix         string        `xml:"Prefix"`
	Marker         string        `xml:"Marker"`
	MaxKeys        int           `xml:"MaxKeys"`
	Delimiter      string        `xml:"Delimiter"`
	EncodingType   string        `xml:"EncodingType,omitempty"`
	IsTruncated    bool          `xml:"IsTruncated"`
	NextMarker     string        `xml:"NextMarker,omitempty"`
	Contents       []xmlContents `xml:"Contents"`
	CommonPrefixes []xmlPrefix   `xml:"CommonPrefixes"`
}

type listV2Result struct {
	XMLName               xml.Name      `xml:"ListBucketResult"`
	Name                  string        `xml:"Name"`
	Prefix                string        `xml:"Prefix"`
	StartAfter            string        `xml:"StartAfter,omitempty"`
	ContinuationToken     string        `xml:"ContinuationToken,omitempty"`
	MaxKeys               int           `xml:"MaxKeys"`
	Delimiter             string        `xml:"Delimiter"`
	EncodingType          string        `xml:"EncodingType,omitempty"`
	IsTruncated           bool          `xml:"IsTruncated"`
	KeyCount              int           `xml:"KeyCount"`
	NextContinuationToken string        `xml:"NextContinuationToken,omitempty"`
	Contents              []xmlContents `xml:"Contents"`
	CommonPrefixes        []xmlPrefix   `xml:"CommonPrefixes"`
}

// encodeKey applies encoding-type=url: what url.QueryUnescape (the OSS SDK)
// and url.PathUnescape both decode back to the key.
func encodeKey(s string, enc bool) string {
	if !enc {
		return s
	}
	e := url.QueryEscape(s)
	e = strings.ReplaceAll(e, "+", "%20")
	return strings.ReplaceAll(e, "%2F", "/")
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func (s *Server) contents(res listResult, enc, withOwner bool) ([]xmlContents, []xmlPrefix) {
	cs := make([]xmlContents, 0, len(res.objects))
	for _, e := range res.objects {
		typ := "Normal"
		if e.app {
			typ = "Appendable"
		} else if e.multi {
			typ = "Multipart"
		}
		if e.link {
			typ = "Symlink"
		}
		c := xmlContents{Key: encodeKey(e.key, enc), LastModified: isoTime(e.mtime), ETag: `"` + e.etag + `"`,
			Type: typ, Size: e.size, StorageClass: "Standard"}
		if withOwner {
			c.Owner = &owner{ID: "ossemu", DisplayName: "ossemu"}
		}
		cs = append(cs, c)
	}
	ps := make([]xmlPrefix, 0, len(res.prefixes))
	for _, p := range res.prefixes {
		ps = append(ps, xmlPrefix{Prefix: encodeKey(p, enc)})
	}
	return cs, ps
}

func parseMaxKeys(q url.Values) (int, bool) {
	v := q.Get("max-keys")
	if v == "" {
		return 1000, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	if n > 1000 {
		n = 1000
	}
	return n, true
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	q := r.URL.Query()
	maxKeys, ok := parseMaxKeys(q)
	if !ok {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "max-keys must be a number from 0 to 1000")
		return
	}
	enc := q.Get("encoding-type") == "url"
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	v2 := q.Get("list-type") == "2"
	marker := q.Get("marker")
	if v2 {
		rc.op = "ListObjectsV2"
		marker = q.Get("start-after")
		if t := q.Get("continuation-token"); t != "" {
			b, err := base64.RawURLEncoding.DecodeString(t)
			if err != nil {
				s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "malformed continuation-token")
				return
			}
			if string(b) > marker {
				marker = string(b)
			}
		}
	} else {
		rc.op = "ListObjects"
	}
	s.count(rc.op)
	if !s.bucketExists(rc.bucket) {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
		return
	}
	var res listResult
	var err error
	if s.synth != nil && rc.bucket == s.synth.Bucket {
		res = s.synth.list(prefix, delim, marker, maxKeys)
	} else {
		res, err = s.list(rc.bucket, prefix, delim, marker, maxKeys)
	}
	if err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	encType := ""
	if enc {
		encType = "url"
	}
	if v2 {
		cs, ps := s.contents(res, enc, q.Get("fetch-owner") == "true")
		out := listV2Result{Name: rc.bucket, Prefix: encodeKey(prefix, enc), StartAfter: encodeKey(q.Get("start-after"), enc),
			ContinuationToken: q.Get("continuation-token"), MaxKeys: maxKeys, Delimiter: encodeKey(delim, enc),
			EncodingType: encType, IsTruncated: res.truncated, KeyCount: len(cs) + len(ps), Contents: cs, CommonPrefixes: ps}
		if res.truncated {
			out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(res.next))
		}
		s.writeXML(w, r, rc, http.StatusOK, out)
		return
	}
	cs, ps := s.contents(res, enc, true)
	out := listV1Result{Name: rc.bucket, Prefix: encodeKey(prefix, enc), Marker: encodeKey(q.Get("marker"), enc),
		MaxKeys: maxKeys, Delimiter: encodeKey(delim, enc), EncodingType: encType, IsTruncated: res.truncated,
		Contents: cs, CommonPrefixes: ps}
	if res.truncated {
		// OSS always returns NextMarker on a truncated page (S3 only with a
		// delimiter); the aliyun SDK pages with it.
		out.NextMarker = encodeKey(res.next, enc)
	}
	s.writeXML(w, r, rc, http.StatusOK, out)
}
