package ossemu

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxPostFields bounds the form's fields before the file, all together:
// the stores cap them at a few KB (the policy is the largest), and they
// are held in memory before the signature is checked.
const maxPostFields = 64 << 10

// maxPostObject is the largest file a form upload may carry (5 GiB, as
// both stores).
const maxPostObject = 5 << 30

// isPostObject reports a browser form upload (PostObject): a POST of
// multipart/form-data to a bucket itself, without an Authorization header
// or a presigned query. Its signature is in the form, so authenticate lets
// exactly this request through to handlePostObject, which checks it; route
// sends nothing else unsigned there (see route's bucket POST).
func isPostObject(r *http.Request, rc *reqCtx) bool {
	return r.Method == http.MethodPost && rc.bucket != "" && rc.key == "" &&
		r.Header.Get("Authorization") == "" && !r.URL.Query().Has("delete") &&
		isFormData(r)
}

func isFormData(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/form-data")
}

type postResponse struct {
	XMLName  xml.Name `xml:"PostResponse"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

// postPolicy is a decoded POST policy document.
type postPolicy struct {
	Expiration string `json:"expiration"`
	Conditions []any  `json:"conditions"`
}

// readPostFields reads the form's fields up to the file part, with names
// lower-cased (the stores match them case-insensitively). The file is
// nil when the form has none.
func readPostFields(mr *multipart.Reader) (map[string]string, *multipart.Part, *authError) {
	malformed := &authError{http.StatusBadRequest, "MalformedPOSTRequest", "The body of your POST request is not well-formed multipart/form-data."}
	fields := map[string]string{}
	left := int64(maxPostFields)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return fields, nil, nil
		}
		if err != nil {
			return nil, nil, malformed
		}
		name := strings.ToLower(p.FormName())
		if name == "file" {
			return fields, p, nil
		}
		v, err := io.ReadAll(io.LimitReader(p, left+1))
		if err != nil {
			return nil, nil, malformed
		}
		// Names count too: many empty fields must not grow the map freely.
		if left -= int64(len(name) + len(v)); left < 0 {
			return nil, nil, &authError{http.StatusBadRequest, "MaxPostPreDataLengthExceeded", "Your POST request fields preceding the upload file were too large."}
		}
		if _, dup := fields[name]; !dup {
			fields[name] = string(v)
		}
	}
}

// handlePostObject stores the form's file as a PUT would: the fields
// before the file name the key (with ${filename}), the policy and its
// signature (OSS V1 and V4, S3 V2 and V4, see postAuth), Content-Type,
// user metadata, the ACL and the answer (success_action_redirect or
// success_action_status). The policy's conditions are enforced before
// anything is stored; fields after the file are ignored, as the stores do.
func (s *Server) handlePostObject(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.begin(rc, "PostObject")
	fail := func(e *authError) { s.writeError(w, r, rc, e.status, e.code, e.msg) }
	mr, err := r.MultipartReader()
	if err != nil {
		fail(&authError{http.StatusBadRequest, "MalformedPOSTRequest", "The body of your POST request is not well-formed multipart/form-data."})
		return
	}
	fields, file, e := readPostFields(mr)
	if e != nil {
		fail(e)
		return
	}
	rc.s3 = fields["x-amz-algorithm"] != "" || fields["x-amz-credential"] != "" || fields["x-amz-signature"] != "" ||
		fields["awsaccesskeyid"] != ""
	if file == nil {
		fail(&authError{http.StatusBadRequest, "InvalidArgument", "POST requires exactly one file upload per request."})
		return
	}
	rawKey, ok := fields["key"]
	if !ok {
		fail(&authError{http.StatusBadRequest, "InvalidArgument", "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields."})
		return
	}
	key := strings.ReplaceAll(rawKey, "${filename}", file.FileName())
	rc.key = key
	if e := s.postAuth(rc, fields); e != nil {
		fail(e)
		return
	}
	maxSize := int64(maxPostObject)
	minSize := int64(0)
	if p := fields["policy"]; p != "" {
		pol, e := parsePostPolicy(p)
		if e == nil {
			e = pol.check(rc, rawKey, fields)
		}
		if e != nil {
			fail(e)
			return
		}
		if lo, hi, ok := pol.lengthRange(); ok {
			minSize, maxSize = lo, min(hi, maxSize)
		}
	}
	if !s.bucketExists(rc.bucket) {
		fail(&authError{http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist."})
		return
	}
	if err := checkKey(key); err != nil {
		s.receiveError(w, r, rc, err)
		return
	}
	hdr := http.Header{}
	for k, v := range fields {
		if strings.HasPrefix(k, "x-oss-meta-") || strings.HasPrefix(k, "x-amz-meta-") || k == "x-oss-object-acl" {
			hdr.Set(k, v)
		}
	}
	if v, ok := fields["acl"]; ok && rc.s3 {
		hdr.Set("x-amz-acl", v)
	}
	acl, err := requestACL(&http.Request{Header: hdr}, rc, false)
	if err != nil {
		s.badHeader(w, r, rc, err)
		return
	}
	f, err := s.tempFile()
	if err != nil {
		fail(&authError{http.StatusInternalServerError, "InternalError", err.Error()})
		return
	}
	drop := func() { f.Close(); os.Remove(f.Name()) }
	hw := newHashWriter()
	// One byte past the limit tells a file too large without reading it all.
	n, err := io.Copy(io.MultiWriter(f, hw), io.LimitReader(file, maxSize+1))
	s.add("bytes.in", n)
	if err != nil {
		drop()
		fail(&authError{http.StatusBadRequest, "IncompleteBody", err.Error()})
		return
	}
	if n > maxSize {
		drop()
		fail(&authError{http.StatusBadRequest, "EntityTooLarge", fmt.Sprintf("Your proposed upload exceeds the maximum allowed size (more than %d bytes).", maxSize)})
		return
	}
	if n < minSize {
		drop()
		fail(&authError{http.StatusBadRequest, "EntityTooSmall", fmt.Sprintf("Your proposed upload is smaller than the minimum allowed size (%d bytes < %d).", n, minSize)})
		return
	}
	drainBody(r)
	etag, crc := hw.etag(), hw.crc.Sum64()
	if strings.HasSuffix(key, "/") {
		drop()
		if n != 0 {
			fail(&authError{http.StatusBadRequest, "InvalidObjectName", "ossemu stores a key ending in '/' as a directory: it must be empty"})
			return
		}
		if err := s.makeMarker(rc.bucket, key); err != nil {
			s.receiveError(w, r, rc, err)
			return
		}
		if acl != "" {
			if err := s.updateObjectMeta(rc.bucket, key, func(m *meta) { m.ACL = acl }); err != nil {
				s.receiveError(w, r, rc, err)
				return
			}
		}
		etag, crc = emptyMD5, 0
	} else {
		m := meta{ETag: etag, CRC64: crc, HasCRC: true, CType: fields["content-type"], User: userMeta(hdr), ACL: acl}
		oi, err := s.publish(f, rc.bucket, key, m)
		if err != nil {
			s.receiveError(w, r, rc, err)
			return
		}
		etag, crc = oi.ETag, oi.CRC64
	}
	h := w.Header()
	h.Set("ETag", `"`+etag+`"`)
	h.Set("x-oss-hash-crc64ecma", strconv.FormatUint(crc, 10))
	loc := "http://" + r.Host + "/" + rc.bucket + "/" + awsEscape(key, true)
	if rc.vhost {
		loc = "http://" + r.Host + "/" + awsEscape(key, true)
	}
	h.Set("Location", loc)
	redirect := fields["success_action_redirect"]
	if redirect == "" {
		redirect = fields["redirect"] // the older S3 name
	}
	if u, err := url.Parse(redirect); err == nil && u.IsAbs() {
		// A valid URL: 303 to it with the bucket, key and ETag added.
		q := u.Query()
		q.Set("bucket", rc.bucket)
		q.Set("key", key)
		q.Set("etag", `"`+etag+`"`)
		u.RawQuery = q.Encode()
		h.Set("Location", u.String())
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	switch fields["success_action_status"] {
	case "200":
		w.WriteHeader(http.StatusOK)
	case "201":
		s.writeXML(w, r, rc, http.StatusCreated, postResponse{Location: loc, Bucket: rc.bucket, Key: key, ETag: `"` + etag + `"`})
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// postAuth checks the form's signature of its policy (the base64 text as
// sent):
//   - OSS V1 (OSSAccessKeyId, Signature) and S3 V2 (AWSAccessKeyId,
//     Signature): base64(HMAC-SHA1(secret, policy));
//   - OSS V4 (x-oss-signature-version OSS4-HMAC-SHA256, x-oss-credential,
//     x-oss-date, x-oss-signature): hex HMAC-SHA256 of the policy with the
//     aliyun_v4 signing key;
//   - S3 V4 (x-amz-algorithm AWS4-HMAC-SHA256, x-amz-credential,
//     x-amz-date, x-amz-signature): hex HMAC-SHA256 with the SigV4 key.
//
// A form without any passes only with Options.Anonymous; as in
// authenticate, Anonymous passes any signature but a key id set must match.
func (s *Server) postAuth(rc *reqCtx, f map[string]string) *authError {
	var ak, got string
	var want func(secret string) (string, *authError)
	switch {
	case f["x-oss-signature-version"] != "" || f["x-oss-credential"] != "" || f["x-oss-signature"] != "":
		if f["x-oss-signature-version"] != "OSS4-HMAC-SHA256" {
			return &authError{http.StatusBadRequest, "InvalidArgument", "x-oss-signature-version must be OSS4-HMAC-SHA256."}
		}
		cred := strings.Split(f["x-oss-credential"], "/")
		ak, got = cred[0], f["x-oss-signature"]
		want = func(secret string) (string, *authError) {
			if len(cred) != 5 || cred[4] != "aliyun_v4_request" {
				return "", &authError{http.StatusBadRequest, "InvalidArgument", "malformed x-oss-credential: want AK/DATE/REGION/oss/aliyun_v4_request"}
			}
			if d := f["x-oss-date"]; len(d) < 8 || d[:8] != cred[1] {
				return "", &authError{http.StatusBadRequest, "InvalidArgument", "x-oss-date does not match the date of x-oss-credential"}
			}
			return hex.EncodeToString(hmacSum(sha256.New, ossV4Key(secret, cred), f["policy"])), nil
		}
	case f["x-amz-algorithm"] != "" || f["x-amz-credential"] != "" || f["x-amz-signature"] != "":
		if f["x-amz-algorithm"] != "AWS4-HMAC-SHA256" {
			return &authError{http.StatusBadRequest, "InvalidRequest", "The algorithm field must be AWS4-HMAC-SHA256."}
		}
		cred := strings.Split(f["x-amz-credential"], "/")
		ak, got = cred[0], f["x-amz-signature"]
		want = func(secret string) (string, *authError) {
			if len(cred) != 5 || cred[4] != "aws4_request" {
				return "", &authError{http.StatusBadRequest, "AuthorizationQueryParametersError", "malformed x-amz-credential: want AK/DATE/REGION/SERVICE/aws4_request"}
			}
			if d := f["x-amz-date"]; len(d) < 8 || d[:8] != cred[1] {
				return "", &authError{http.StatusBadRequest, "AuthorizationQueryParametersError", "x-amz-date does not match the date of x-amz-credential"}
			}
			return hex.EncodeToString(hmacSum(sha256.New, s3V4Key(secret, cred), f["policy"])), nil
		}
	case f["ossaccesskeyid"] != "" || f["awsaccesskeyid"] != "":
		ak, got = f["ossaccesskeyid"], f["signature"]
		if ak == "" {
			ak = f["awsaccesskeyid"]
		}
		want = func(secret string) (string, *authError) {
			return base64.StdEncoding.EncodeToString(hmacSum(sha1.New, []byte(secret), f["policy"])), nil
		}
	default:
		if s.opt.Anonymous {
			return nil
		}
		if rc.s3 {
			return denied("AccessDenied", "Access Denied")
		}
		return denied("AccessDenied", "You have no right to access this object because of bucket acl.")
	}
	if s.opt.AccessKeyID != "" && ak != s.opt.AccessKeyID {
		if rc.s3 {
			return denied("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
		}
		return denied("InvalidAccessKeyId", "The OSS Access Key Id you provided does not exist in our records.")
	}
	if s.opt.Anonymous {
		return nil
	}
	if f["policy"] == "" {
		return &authError{http.StatusBadRequest, "InvalidArgument", "Bucket POST must contain a field named 'policy' when it is signed."}
	}
	if got == "" {
		return &authError{http.StatusBadRequest, "InvalidArgument", "Bucket POST must contain the signature of its policy."}
	}
	sig, e := want(s.opt.AccessKeySecret)
	if e != nil {
		return e
	}
	if !hmac.Equal([]byte(sig), []byte(got)) {
		return errSignature
	}
	return nil
}

func badPolicy(msg string) *authError {
	return &authError{http.StatusBadRequest, "InvalidPolicyDocument", msg}
}

func parsePostPolicy(b64 string) (*postPolicy, *authError) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, badPolicy("Invalid Policy: Invalid Base64 Encoding")
	}
	var p postPolicy
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badPolicy("Invalid Policy: Invalid JSON.")
	}
	return &p, nil
}

func policyFailed(cond any) *authError {
	b, _ := json.Marshal(cond)
	return denied("AccessDenied", "Invalid according to Policy: Policy Condition failed: "+string(b))
}

// postUnpoliced are the form fields S3 does not require a condition for.
var postUnpoliced = map[string]bool{"file": true, "policy": true, "x-amz-signature": true, "awsaccesskeyid": true, "signature": true}

// check verifies the expiration and the exact-match, eq and starts-with
// conditions, and the form of content-length-range (applied to the file
// by the caller, see lengthRange). On S3 every form field but the
// signature's own and x-ignore-* must be named by a condition ("Extra
// input fields"); OSS does not ask that.
func (p *postPolicy) check(rc *reqCtx, rawKey string, f map[string]string) *authError {
	if p.Expiration == "" {
		return badPolicy("Invalid Policy: Policy missing expiration.")
	}
	exp, err := time.Parse(time.RFC3339, p.Expiration)
	if err != nil {
		return badPolicy("Invalid Policy: Invalid 'expiration' value: '" + p.Expiration + "'")
	}
	if time.Now().After(exp) {
		return denied("AccessDenied", "Invalid according to Policy: Policy expired.")
	}
	value := func(name string) string {
		switch name = strings.ToLower(strings.TrimPrefix(name, "$")); name {
		case "bucket":
			return rc.bucket
		case "key":
			return rawKey
		}
		return f[name]
	}
	named := map[string]bool{}
	for _, c := range p.Conditions {
		switch c := c.(type) {
		case map[string]any:
			for k, v := range c {
				sv, ok := v.(string)
				if !ok {
					return badPolicy(fmt.Sprintf("Invalid Policy: Invalid Simple-Condition: value of %q must be a string.", k))
				}
				named[strings.ToLower(strings.TrimPrefix(k, "$"))] = true
				if value(k) != sv {
					return policyFailed(c)
				}
			}
		case []any:
			if len(c) != 3 {
				return badPolicy("Invalid Policy: Invalid Condition: want three elements.")
			}
			op, _ := c[0].(string)
			switch strings.ToLower(op) {
			case "content-length-range":
				lo, ok1 := policyInt(c[1])
				hi, ok2 := policyInt(c[2])
				if !ok1 || !ok2 || lo < 0 || hi < lo {
					return badPolicy("Invalid Policy: Invalid content-length-range.")
				}
			case "eq", "starts-with":
				name, ok1 := c[1].(string)
				want, ok2 := c[2].(string)
				if !ok1 || !ok2 || !strings.HasPrefix(name, "$") {
					return badPolicy("Invalid Policy: Invalid Condition: " + op)
				}
				named[strings.ToLower(name[1:])] = true
				got := value(name)
				if strings.EqualFold(op, "eq") && got != want || strings.EqualFold(op, "starts-with") && !strings.HasPrefix(got, want) {
					return policyFailed(c)
				}
			default:
				return badPolicy("Invalid Policy: Invalid Condition operator: " + op)
			}
		default:
			return badPolicy("Invalid Policy: Invalid Condition.")
		}
	}
	if rc.s3 {
		var extra []string
		for k := range f {
			if !named[k] && !postUnpoliced[k] && !strings.HasPrefix(k, "x-ignore-") {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			return denied("AccessDenied", "Invalid according to Policy: Extra input fields: "+strings.Join(extra, ", "))
		}
	}
	return nil
}

// lengthRange returns the policy's content-length-range (the narrowest
// when it names several), ok false when it has none.
func (p *postPolicy) lengthRange() (lo, hi int64, ok bool) {
	for _, c := range p.Conditions {
		a, isList := c.([]any)
		if !isList || len(a) != 3 {
			continue
		}
		if op, _ := a[0].(string); !strings.EqualFold(op, "content-length-range") {
			continue
		}
		l, _ := policyInt(a[1])
		h, _ := policyInt(a[2])
		if !ok {
			lo, hi, ok = l, h, true
			continue
		}
		lo, hi = max(lo, l), min(hi, h)
	}
	return lo, hi, ok
}

// policyInt reads a JSON number (or a numeric string) as an int64.
func policyInt(v any) (int64, bool) {
	switch v := v.(type) {
	case float64:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
