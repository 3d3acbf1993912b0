package ossemu

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ACLs and tags (PutObjectACL, Put/DeleteObjectTagging, bucket ACL and
// tags, GetBucketInfo, GetBucketStat). An object's ACL and tags live in its
// meta record (meta.ACL, meta.Tags), a bucket's in an extended attribute of
// the bucket directory (bucketMeta). ACLs are recorded and reported, never
// enforced: every signed request acts as the bucket's owner.

// xattrBucket holds a bucket's bucketMeta as JSON.
const xattrBucket = "user.ossemu.bucket"

// tag is one object or bucket tag.
type tag struct {
	Key   string `xml:"Key" json:"k"`
	Value string `xml:"Value" json:"v"`
}

// bucketMeta is what the emulator keeps about a bucket beyond its objects.
type bucketMeta struct {
	ACL  string `json:"acl,omitempty"`
	Tags []tag  `json:"tags,omitempty"`
}

// Tag limits of both stores: 10 tags per object (OSS and S3), 20 per
// bucket on OSS and 50 on S3; keys of 1-128 bytes, values of up to 256.
const (
	maxObjectTags   = 10
	maxBucketTagsOS = 20
	maxBucketTagsS3 = 50
	maxTagKey       = 128
	maxTagValue     = 256
)

var (
	ossObjectACLs = map[string]bool{"default": true, "private": true, "public-read": true, "public-read-write": true}
	ossBucketACLs = map[string]bool{"private": true, "public-read": true, "public-read-write": true}
	s3CannedACLs  = map[string]bool{"private": true, "public-read": true, "public-read-write": true, "authenticated-read": true,
		"aws-exec-read": true, "bucket-owner-read": true, "bucket-owner-full-control": true, "log-delivery-write": true}
)

// errInvalidACL and errInvalidTag name bad input in headers or bodies.
var (
	errInvalidACL = errors.New("no such access control exists")
	errInvalidTag = errors.New("invalid tag")
)

// requestACL returns the canned ACL a request sets ("" when none): OSS
// objects use x-oss-object-acl, OSS buckets x-oss-acl, S3 x-amz-acl.
func requestACL(r *http.Request, rc *reqCtx, bucket bool) (string, error) {
	var v string
	var ok map[string]bool
	switch {
	case rc.s3:
		v, ok = r.Header.Get("x-amz-acl"), s3CannedACLs
	case bucket:
		v, ok = r.Header.Get("x-oss-acl"), ossBucketACLs
	default:
		v, ok = r.Header.Get("x-oss-object-acl"), ossObjectACLs
	}
	if v != "" && !ok[v] {
		return "", errInvalidACL
	}
	return v, nil
}

// requestTags parses the x-oss-tagging / x-amz-tagging header
// ("k1=v1&k2=v2", URL-encoded); nil when absent.
func requestTags(r *http.Request) ([]tag, error) {
	v := r.Header.Get("x-oss-tagging") + r.Header.Get("x-amz-tagging")
	if v == "" {
		return nil, nil
	}
	q, err := url.ParseQuery(v)
	if err != nil {
		return nil, errInvalidTag
	}
	var tags []tag
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, errInvalidTag // a key given twice
		}
		tags = append(tags, tag{Key: k, Value: vs[0]})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].Key < tags[j].Key })
	return tags, checkTags(tags, maxObjectTags)
}

// checkTags applies the stores' limits.
func checkTags(tags []tag, max int) error {
	if len(tags) > max {
		return errInvalidTag
	}
	seen := map[string]bool{}
	for _, t := range tags {
		if t.Key == "" || len(t.Key) > maxTagKey || len(t.Value) > maxTagValue || seen[t.Key] {
			return errInvalidTag
		}
		seen[t.Key] = true
	}
	return nil
}

// badHeader answers a request whose ACL or tagging header is invalid.
func (s *Server) badHeader(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error) {
	if errors.Is(err, errInvalidTag) {
		s.writeError(w, r, rc, http.StatusBadRequest, "InvalidTag", "The tag provided was not a valid tag.")
		return
	}
	s.writeError(w, r, rc, http.StatusBadRequest, "InvalidArgument", "no such bucket access control exists")
}

// objectHeaders returns the ACL and tags a request creating an object
// sets; the caller answers a non-nil error with badHeader.
func objectHeaders(r *http.Request, rc *reqCtx) (string, []tag, error) {
	acl, err := requestACL(r, rc, false)
	if err != nil {
		return "", nil, err
	}
	tags, err := requestTags(r)
	return acl, tags, err
}

type xmlTagSet struct {
	XMLName xml.Name `xml:"Tagging"`
	Tags    []tag    `xml:"TagSet>Tag"`
}

// readTagging reads a Tagging document from the request body.
func readTagging(r *http.Request, max int) ([]tag, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var ts xmlTagSet
	if xml.Unmarshal(body, &ts) != nil {
		return nil, errMalformedXML
	}
	return ts.Tags, checkTags(ts.Tags, max)
}

var errMalformedXML = errors.New("malformed XML")

// updateObjectMeta changes an existing object's meta record in place (its
// data and mtime stay). A directory marker keeps its record on the
// directory. The append lock keeps an append from racing the rewrite.
func (s *Server) updateObjectMeta(bucket, key string, change func(*meta)) error {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	oi, err := s.lookupRaw(bucket, key)
	if err != nil {
		return fs.ErrNotExist
	}
	m := oi.meta
	if oi.isDir {
		m, _ = readMeta(oi.path)
	}
	change(&m)
	return writeMetaPath(oi.path, m)
}

// handlePutObjectACL serves PUT ?acl on an object (SetObjectACL,
// PutObjectAcl with a canned ACL header).
func (s *Server) handlePutObjectACL(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "PutObjectACL")
	acl, err := putACL(r, rc, false)
	if err != nil {
		s.aclError(w, r, rc, err)
		return
	}
	s.finishUpdate(w, r, rc, s.updateObjectMeta(rc.bucket, rc.key, func(m *meta) { m.ACL = acl }), http.StatusOK)
}

// aclError answers a bad ACL request body or header.
func (s *Server) aclError(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error) {
	if errors.Is(err, errMalformedXML) {
		s.writeError(w, r, rc, http.StatusBadRequest, "MalformedACLError", "The XML you provided was not well-formed or did not validate against our published schema.")
		return
	}
	s.badHeader(w, r, rc, err)
}

type s3ACLPolicy struct {
	Grants []struct {
		Grantee struct {
			URI string `xml:"URI"`
		} `xml:"Grantee"`
		Permission string `xml:"Permission"`
	} `xml:"AccessControlList>Grant"`
}

// s3ACLBody maps an S3 AccessControlPolicy body to the canned ACL it
// amounts to: grants to AllUsers make it public-read(-write), anything
// else private (the emulator keeps canned ACLs only).
func s3ACLBody(r *http.Request) (string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(body) == 0 {
		return "", errMalformedXML
	}
	var p s3ACLPolicy
	if xml.Unmarshal(body, &p) != nil {
		return "", errMalformedXML
	}
	read, write := false, false
	for _, g := range p.Grants {
		if strings.HasSuffix(g.Grantee.URI, "/global/AllUsers") {
			read = read || g.Permission == "READ" || g.Permission == "FULL_CONTROL"
			write = write || g.Permission == "WRITE" || g.Permission == "FULL_CONTROL"
		}
	}
	switch {
	case read && write:
		return "public-read-write", nil
	case read:
		return "public-read", nil
	}
	return "private", nil
}

// finishUpdate answers an object meta update.
func (s *Server) finishUpdate(w http.ResponseWriter, r *http.Request, rc *reqCtx, err error, status int) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	case err != nil:
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
	default:
		w.WriteHeader(status)
	}
}

// handlePutObjectTagging serves PUT ?tagging on an object.
func (s *Server) handlePutObjectTagging(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "PutObjectTagging")
	tags, err := readTagging(r, maxObjectTags)
	drainBody(r)
	if errors.Is(err, errMalformedXML) {
		s.writeError(w, r, rc, http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
		return
	}
	if err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	s.finishUpdate(w, r, rc, s.updateObjectMeta(rc.bucket, rc.key, func(m *meta) { m.Tags = tags }), http.StatusOK)
}

// handleDeleteObjectTagging serves DELETE ?tagging on an object.
func (s *Server) handleDeleteObjectTagging(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "DeleteObjectTagging")
	s.finishUpdate(w, r, rc, s.updateObjectMeta(rc.bucket, rc.key, func(m *meta) { m.Tags = nil }), http.StatusNoContent)
}

// readBucketMeta returns a bucket's record (zero when it has none).
func (s *Server) readBucketMeta(bucket string) bucketMeta {
	var bm bucketMeta
	buf := make([]byte, 64<<10)
	if n, err := unix.Getxattr(s.bucketPath(bucket), xattrBucket, buf); err == nil {
		_ = json.Unmarshal(buf[:n], &bm)
	}
	return bm
}

// updateBucketMeta changes a bucket's record.
func (s *Server) updateBucketMeta(bucket string, change func(*bucketMeta)) error {
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	bm := s.readBucketMeta(bucket)
	change(&bm)
	b, err := json.Marshal(bm)
	if err != nil {
		return err
	}
	return unix.Setxattr(s.bucketPath(bucket), xattrBucket, b, 0)
}

// handlePutBucketConfig serves PUT ?acl and PUT ?tagging on a bucket.
func (s *Server) handlePutBucketConfig(w http.ResponseWriter, r *http.Request, rc *reqCtx, q url.Values) {
	if !s.bucketExists(rc.bucket) {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
		return
	}
	var change func(*bucketMeta)
	if q.Has("acl") {
		s.begin(rc, "PutBucketACL")
		acl, err := putACL(r, rc, true)
		if err != nil {
			s.aclError(w, r, rc, err)
			return
		}
		change = func(bm *bucketMeta) { bm.ACL = acl }
	} else {
		s.begin(rc, "PutBucketTagging")
		max := maxBucketTagsOS
		if rc.s3 {
			max = maxBucketTagsS3
		}
		tags, err := readTagging(r, max)
		drainBody(r)
		if errors.Is(err, errMalformedXML) {
			s.writeError(w, r, rc, http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
			return
		}
		if err != nil {
			s.badHeader(w, r, rc, err)
			return
		}
		change = func(bm *bucketMeta) { bm.Tags = tags }
	}
	if err := s.updateBucketMeta(rc.bucket, change); err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleDeleteBucketTagging serves DELETE ?tagging on a bucket.
func (s *Server) handleDeleteBucketTagging(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.beginInBucket(w, r, rc, "DeleteBucketTagging") {
		return
	}
	if err := s.updateBucketMeta(rc.bucket, func(bm *bucketMeta) { bm.Tags = nil }); err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// bucketACL is a bucket's ACL, "private" unless set.
func (s *Server) bucketACL(bucket string) string {
	if acl := s.readBucketMeta(bucket).ACL; acl != "" {
		return acl
	}
	return "private"
}

type xmlBucketInfo struct {
	XMLName xml.Name `xml:"BucketInfo"`
	Bucket  struct {
		Name             string `xml:"Name"`
		AccessMonitor    string `xml:"AccessMonitor"`
		Location         string `xml:"Location"`
		CreationDate     string `xml:"CreationDate"`
		ExtranetEndpoint string `xml:"ExtranetEndpoint"`
		IntranetEndpoint string `xml:"IntranetEndpoint"`
		ACL              string `xml:"AccessControlList>Grant"`
		RedundancyType   string `xml:"DataRedundancyType"`
		Owner            owner  `xml:"Owner"`
		StorageClass     string `xml:"StorageClass"`
	} `xml:"Bucket"`
}

// handleBucketInfo serves OSS GetBucketInfo.
func (s *Server) handleBucketInfo(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "GetBucketInfo")
	fi, err := os.Stat(s.bucketPath(rc.bucket))
	if err != nil || !fi.IsDir() {
		s.writeError(w, r, rc, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist.")
		return
	}
	var out xmlBucketInfo
	b := &out.Bucket
	b.Name, b.AccessMonitor, b.Location = rc.bucket, "Disabled", "oss-local"
	b.CreationDate = isoTime(fi.ModTime())
	b.ExtranetEndpoint, b.IntranetEndpoint = r.Host, r.Host
	b.ACL, b.RedundancyType, b.StorageClass = s.bucketACL(rc.bucket), "LRS", "Standard"
	b.Owner = owner{ID: "ossemu", DisplayName: "ossemu"}
	s.writeXML(w, r, rc, http.StatusOK, out)
}

type xmlBucketStat struct {
	XMLName              xml.Name `xml:"BucketStat"`
	Storage              int64    `xml:"Storage"`
	ObjectCount          int64    `xml:"ObjectCount"`
	MultipartUploadCount int64    `xml:"MultipartUploadCount"`
	LiveChannelCount     int64    `xml:"LiveChannelCount"`
	LastModifiedTime     int64    `xml:"LastModifiedTime"`
	StandardStorage      int64    `xml:"StandardStorage"`
	StandardObjectCount  int64    `xml:"StandardObjectCount"`
}

// handleBucketStat serves OSS GetBucketStat by walking the bucket: exact,
// not the store's delayed figures.
func (s *Server) handleBucketStat(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.beginInBucket(w, r, rc, "GetBucketStat") {
		return
	}
	var st xmlBucketStat
	var last time.Time
	top := s.bucketPath(rc.bucket)
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == top {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		if d.IsDir() && !isMarker(p) {
			return nil
		}
		if !d.IsDir() && !fi.Mode().IsRegular() {
			return nil
		}
		st.ObjectCount++
		if !d.IsDir() {
			st.Storage += fi.Size()
		}
		if fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		return nil
	})
	if err != nil {
		s.writeError(w, r, rc, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	st.MultipartUploadCount = s.countUploads(rc.bucket)
	if !last.IsZero() {
		st.LastModifiedTime = last.Unix()
	}
	st.StandardStorage, st.StandardObjectCount = st.Storage, st.ObjectCount
	s.writeXML(w, r, rc, http.StatusOK, st)
}

// countUploads counts the bucket's multipart uploads in progress.
func (s *Server) countUploads(bucket string) int64 {
	des, err := os.ReadDir(filepath.Join(s.root, internalDir, "uploads"))
	if err != nil {
		return 0
	}
	var n int64
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(s.uploadDir(de.Name()), "upload.json"))
		var u uploadRecord
		if err == nil && json.Unmarshal(b, &u) == nil && u.Bucket == bucket {
			n++
		}
	}
	return n
}

// taggingCountHeader reports an object's tag count as GET and HEAD do.
func taggingCountHeader(h http.Header, rc *reqCtx, tags []tag) {
	if len(tags) == 0 {
		return
	}
	name := "x-oss-tagging-count"
	if rc.s3 {
		name = "x-amz-tagging-count"
	}
	h.Set(name, strconv.Itoa(len(tags)))
}

type s3Grantee struct {
	XSI         string `xml:"xmlns:xsi,attr"`
	Type        string `xml:"xsi:type,attr"`
	ID          string `xml:"ID,omitempty"`
	DisplayName string `xml:"DisplayName,omitempty"`
	URI         string `xml:"URI,omitempty"`
}

type s3Grant struct {
	Grantee    s3Grantee `xml:"Grantee"`
	Permission string    `xml:"Permission"`
}

type s3ACLResult struct {
	XMLName xml.Name  `xml:"http://s3.amazonaws.com/doc/2006-03-01/ AccessControlPolicy"`
	Owner   owner     `xml:"Owner"`
	Grants  []s3Grant `xml:"AccessControlList>Grant"`
}

// s3ACL renders a canned ACL as S3's grant list: the owner's
// FULL_CONTROL, plus READ (and WRITE) for AllUsers or AuthenticatedUsers.
func s3ACL(canned string) s3ACLResult {
	const xsi = "http://www.w3.org/2001/XMLSchema-instance"
	o := owner{ID: "ossemu", DisplayName: "ossemu"}
	out := s3ACLResult{Owner: o, Grants: []s3Grant{{Grantee: s3Grantee{XSI: xsi, Type: "CanonicalUser", ID: o.ID, DisplayName: o.DisplayName}, Permission: "FULL_CONTROL"}}}
	group := func(g, perm string) s3Grant {
		return s3Grant{Grantee: s3Grantee{XSI: xsi, Type: "Group", URI: "http://acs.amazonaws.com/groups/global/" + g}, Permission: perm}
	}
	switch canned {
	case "public-read":
		out.Grants = append(out.Grants, group("AllUsers", "READ"))
	case "public-read-write":
		out.Grants = append(out.Grants, group("AllUsers", "READ"), group("AllUsers", "WRITE"))
	case "authenticated-read":
		out.Grants = append(out.Grants, group("AuthenticatedUsers", "READ"))
	}
	return out
}

// putACL reads the ACL a PUT ?acl sets: the canned-ACL header, else (S3) an
// AccessControlPolicy body; neither is InvalidArgument. The body is drained
// either way.
func putACL(r *http.Request, rc *reqCtx, bucket bool) (string, error) {
	acl, err := requestACL(r, rc, bucket)
	if err == nil && acl == "" && rc.s3 {
		acl, err = s3ACLBody(r)
	}
	if err == nil && acl == "" {
		err = errInvalidACL
	}
	drainBody(r)
	return acl, err
}
