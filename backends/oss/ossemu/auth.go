package ossemu

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The access key pair the emulator accepts when none is configured: for
// demos and tests, never for anything that matters. `mlfsd emulate oss`
// documents it.
const (
	DefaultAccessKeyID     = "mlfsd-emulator"
	DefaultAccessKeySecret = "mlfsd-emulator-secret"
)

// authError is why a request is refused: the status and error code the real
// store answers with.
type authError struct {
	status int
	code   string
	msg    string
}

func denied(code, msg string) *authError {
	return &authError{status: http.StatusForbidden, code: code, msg: msg}
}

var errSignature = denied("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method.")

// authenticate checks the request's signature: OSS V1 and V4 and S3 V2 and
// V4, in the Authorization header or a presigned URL's query. With
// Options.Anonymous any request passes (an AccessKeyID set still has to
// match). It also tells whether the client speaks S3.
func (s *Server) authenticate(r *http.Request, rc *reqCtx) *authError {
	auth := r.Header.Get("Authorization")
	q := r.URL.Query()
	var scheme string
	var streaming string // the Credential of a streaming SigV4 upload
	switch {
	case strings.HasPrefix(auth, "OSS "):
		scheme = "oss1"
	case strings.HasPrefix(auth, "OSS4-HMAC-SHA256 "):
		scheme = "oss4"
	case strings.HasPrefix(auth, "AWS "):
		scheme, rc.s3 = "s3v2", true
	case strings.HasPrefix(auth, "AWS4-HMAC-SHA256 "):
		scheme, rc.s3 = "s3v4", true
	case auth != "":
		return &authError{http.StatusBadRequest, "InvalidArgument", "unsupported Authorization header (want OSS, OSS4-HMAC-SHA256, AWS or AWS4-HMAC-SHA256)"}
	case q.Has("OSSAccessKeyId"):
		scheme = "oss1-query"
	case q.Get("x-oss-signature-version") == "OSS4-HMAC-SHA256":
		scheme = "oss4-query"
	case q.Get("X-Amz-Algorithm") != "":
		scheme, rc.s3 = "s3v4-query", true
	case q.Has("AWSAccessKeyId"):
		scheme, rc.s3 = "s3v2-query", true
	case isPostObject(r, rc):
		return nil // signed in the form: handlePostObject checks it
	default:
		rc.s3 = r.Header.Get("X-Amz-Date") != "" || r.Header.Get("X-Amz-Content-Sha256") != ""
		if s.opt.Anonymous {
			return nil
		}
		if rc.s3 {
			return denied("AccessDenied", "Access Denied")
		}
		return denied("AccessDenied", "You have no right to access this object because of bucket acl.")
	}
	var (
		ak, got string
		want    func(secret string) (string, *authError)
	)
	switch scheme {
	case "oss1", "oss1-query":
		date := r.Header.Get("Date")
		if scheme == "oss1" {
			ak, got, _ = strings.Cut(strings.TrimPrefix(auth, "OSS "), ":")
		} else {
			ak, got, date = q.Get("OSSAccessKeyId"), q.Get("Signature"), q.Get("Expires")
			if e := expired(date); e != nil {
				return e
			}
		}
		want = func(secret string) (string, *authError) { return ossV1Signature(r, rc, date, secret), nil }
	case "oss4", "oss4-query":
		var fields map[string]string
		if scheme == "oss4" {
			fields = authFields(strings.TrimPrefix(auth, "OSS4-HMAC-SHA256 "))
		} else {
			fields = map[string]string{"Credential": q.Get("x-oss-credential"), "AdditionalHeaders": q.Get("x-oss-additional-headers"), "Signature": q.Get("x-oss-signature")}
			if e := expiredAfter(q.Get("x-oss-date"), q.Get("x-oss-expires"), "20060102T150405Z"); e != nil {
				return e
			}
		}
		ak, _, _ = strings.Cut(fields["Credential"], "/")
		got = fields["Signature"]
		want = func(secret string) (string, *authError) {
			return ossV4Signature(r, rc, fields, scheme == "oss4-query", secret)
		}
	case "s3v2", "s3v2-query":
		dates := []string{r.Header.Get("Date")}
		if r.Header.Get("X-Amz-Date") != "" {
			dates = append(dates, "") // x-amz-date replaces Date, which is then signed empty
		}
		if scheme == "s3v2" {
			ak, got, _ = strings.Cut(strings.TrimPrefix(auth, "AWS "), ":")
		} else {
			ak, got, dates = q.Get("AWSAccessKeyId"), q.Get("Signature"), []string{q.Get("Expires")}
			if e := expired(dates[0]); e != nil {
				return e
			}
		}
		want = func(secret string) (string, *authError) {
			// A request to a bucket itself ("/bkt?prefix=") is signed
			// "/bkt/" by S3 (as for a virtual-hosted "/"), and as sent
			// by some clients: both pass.
			slashes := []bool{false}
			if rc.key == "" && rc.bucket != "" && !rc.vhost {
				slashes = append(slashes, true)
			}
			var first string
			for _, d := range dates {
				for _, slash := range slashes {
					sig := s3V2Signature(r, rc, d, secret, slash)
					if hmac.Equal([]byte(sig), []byte(got)) {
						return sig, nil
					}
					if first == "" {
						first = sig
					}
				}
			}
			return first, nil
		}
	case "s3v4", "s3v4-query":
		var fields map[string]string
		if scheme == "s3v4" {
			fields = authFields(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "))
		} else {
			if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
				return &authError{http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\""}
			}
			fields = map[string]string{"Credential": q.Get("X-Amz-Credential"), "SignedHeaders": q.Get("X-Amz-SignedHeaders"), "Signature": q.Get("X-Amz-Signature")}
			if e := expiredAfter(q.Get("X-Amz-Date"), q.Get("X-Amz-Expires"), "20060102T150405Z"); e != nil {
				return e
			}
		}
		ak, _, _ = strings.Cut(fields["Credential"], "/")
		got = fields["Signature"]
		want = func(secret string) (string, *authError) {
			return s3V4Signature(r, fields, scheme == "s3v4-query", secret)
		}
		if scheme == "s3v4" && strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-AWS4-HMAC-SHA256-PAYLOAD") {
			streaming = fields["Credential"]
		}
	}
	secret, ruled, e := s.keySecret(r, rc, ak)
	if e != nil {
		return e
	}
	rc.ruled = ruled // access.go
	if s.opt.Anonymous {
		return nil
	}
	sig, e := want(secret)
	if e != nil {
		return e
	}
	if got == "" || !hmac.Equal([]byte(sig), []byte(got)) {
		return errSignature
	}
	if streaming != "" {
		// Each chunk of the body is signed in a chain from this seed
		// signature (awsChunkedReader checks them).
		cred := strings.Split(streaming, "/")
		rc.chunks = &chunkSigning{key: s3V4Key(secret, cred), date: r.Header.Get("X-Amz-Date"),
			scope: strings.Join(cred[1:], "/"), prev: got}
	}
	return nil
}

// chunkSigning is what verifying a STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// body's chunk signatures needs: the signing key, the request's time and
// scope, and the previous signature in the chain (the seed first).
type chunkSigning struct {
	key         []byte
	date, scope string
	prev        string
}

// emptySHA256 is the hex SHA-256 of nothing (chunk signatures sign the
// empty chunk headers with it).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// next checks one chunk's signature given its data's SHA-256, and moves
// the chain on.
func (c *chunkSigning) next(sig string, dataSum []byte) bool {
	sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + c.date + "\n" + c.scope + "\n" + c.prev + "\n" + emptySHA256 + "\n" + hex.EncodeToString(dataSum)
	want := hex.EncodeToString(hmacSum(sha256.New, c.key, sts))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return false
	}
	c.prev = sig
	return true
}

// trailer checks the signature of a signed upload's trailers (canon:
// their "name:value\n" lines), which ends the chain.
func (c *chunkSigning) trailer(sig, canon string) bool {
	sum := sha256.Sum256([]byte(canon))
	sts := "AWS4-HMAC-SHA256-TRAILER\n" + c.date + "\n" + c.scope + "\n" + c.prev + "\n" + hex.EncodeToString(sum[:])
	want := hex.EncodeToString(hmacSum(sha256.New, c.key, sts))
	return sig != "" && hmac.Equal([]byte(want), []byte(sig))
}

// s3V4Key derives SigV4's signing key from a Credential's fields
// (AK/DATE/REGION/SERVICE/aws4_request).
func s3V4Key(secret string, cred []string) []byte {
	k := hmacSum(sha256.New, []byte("AWS4"+secret), cred[1])
	k = hmacSum(sha256.New, k, cred[2])
	k = hmacSum(sha256.New, k, cred[3])
	return hmacSum(sha256.New, k, "aws4_request")
}

// authFields splits "Credential=..., SignedHeaders=..., Signature=..." (AWS
// puts a space after the commas, OSS does not).
func authFields(v string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(f), "=")
		out[k] = val
	}
	return out
}

// expired checks a presigned URL's Expires (Unix seconds).
func expired(v string) *authError {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return denied("AccessDenied", "Invalid Expires: "+v)
	}
	if time.Now().Unix() > n {
		return denied("AccessDenied", "Request has expired.")
	}
	return nil
}

// expiredAfter checks a V4 presigned URL's signing time plus lifetime.
func expiredAfter(date, secs, layout string) *authError {
	t, err := time.Parse(layout, date)
	n, err2 := strconv.ParseInt(secs, 10, 64)
	if err != nil || err2 != nil {
		return denied("AccessDenied", fmt.Sprintf("Invalid date %q or expiry %q", date, secs))
	}
	if time.Now().After(t.Add(time.Duration(n) * time.Second)) {
		return denied("AccessDenied", "Request has expired.")
	}
	return nil
}

func hmacSum(h func() hash.Hash, key []byte, data string) []byte {
	m := hmac.New(h, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// ossSignedParams are the query parameters OSS V1 signs (the
// aliyun-oss-go-sdk's signKeyList); others are not part of the signature.
var ossSignedParams = map[string]bool{}

func init() {
	for _, k := range []string{"acl", "uploads", "location", "cors",
		"logging", "website", "referer", "lifecycle",
		"delete", "append", "tagging", "objectMeta",
		"uploadId", "partNumber", "security-token",
		"position", "img", "style", "styleName",
		"replication", "replicationProgress",
		"replicationLocation", "cname", "bucketInfo",
		"comp", "qos", "live", "status", "vod",
		"startTime", "endTime", "symlink",
		"x-oss-process", "response-content-type", "x-oss-traffic-limit",
		"response-content-language", "response-expires",
		"response-cache-control", "response-content-disposition",
		"response-content-encoding", "udf", "udfName", "udfImage",
		"udfId", "udfImageDesc", "udfApplication",
		"udfApplicationLog", "restore", "callback", "callback-var", "qosInfo",
		"policy", "stat", "encryption", "versions", "versioning", "versionId", "requestPayment",
		"x-oss-request-payer", "sequential",
		"inventory", "inventoryId", "continuation-token", "asyncFetch",
		"worm", "wormId", "wormExtend", "withHashContext",
		"x-oss-enable-md5", "x-oss-enable-sha1", "x-oss-enable-sha256",
		"x-oss-hash-ctx", "x-oss-md5-ctx", "transferAcceleration",
		"regionList", "cloudboxes", "x-oss-ac-source-ip", "x-oss-ac-subnet-mask", "x-oss-ac-vpc-id", "x-oss-ac-forward-allow",
		"metaQuery", "resourceGroup", "rtc", "x-oss-async-process", "responseHeader"} {
		ossSignedParams[k] = true
	}
}

// ossV1Signature is base64(HMAC-SHA1(secret, VERB\nContent-MD5\nContent-Type\n
// Date\nCanonicalizedOSSHeaders CanonicalizedResource)).
func ossV1Signature(r *http.Request, rc *reqCtx, date, secret string) string {
	hv := map[string]string{}
	var names []string
	for k, v := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-oss-") && len(v) > 0 {
			hv[lk] = v[0]
			names = append(names, lk)
		}
	}
	sort.Strings(names) // by name: "x-oss-a" before "x-oss-a-b"
	var hdrs []string
	for _, k := range names {
		hdrs = append(hdrs, k+":"+hv[k]+"\n")
	}
	q := r.URL.Query()
	var keys []string
	for k := range q {
		if ossSignedParams[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sub []string
	for _, k := range keys {
		if v := q.Get(k); v != "" {
			sub = append(sub, k+"="+v)
		} else {
			sub = append(sub, k)
		}
	}
	res := "/"
	if rc.bucket != "" {
		res = "/" + rc.bucket + "/" + rc.key
	}
	if len(sub) > 0 {
		res += "?" + strings.Join(sub, "&")
	}
	sts := r.Method + "\n" + r.Header.Get("Content-MD5") + "\n" + r.Header.Get("Content-Type") + "\n" + date + "\n" + strings.Join(hdrs, "") + res
	return base64.StdEncoding.EncodeToString(hmacSum(sha1.New, []byte(secret), sts))
}

// ossEscape is the SDK's V4 escaping: QueryEscape with spaces as %20.
func ossEscape(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// ossV4Signature computes an OSS4-HMAC-SHA256 signature (the SDK's
// getSignedStrV4): the canonical request covers the method, /bucket/key,
// every query parameter, Content-MD5, Content-Type, x-oss-* and the
// additional headers, and x-oss-content-sha256.
func ossV4Signature(r *http.Request, rc *reqCtx, fields map[string]string, presigned bool, secret string) (string, *authError) {
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[4] != "aliyun_v4_request" {
		return "", &authError{http.StatusBadRequest, "InvalidArgument", "malformed Credential: want AK/DATE/REGION/PRODUCT/aliyun_v4_request"}
	}
	day, region, product := cred[1], cred[2], cred[3]
	var additional []string
	if v := fields["AdditionalHeaders"]; v != "" {
		additional = strings.Split(v, ";")
	}
	hv := map[string]string{}
	for k, v := range r.Header {
		lk := strings.ToLower(k)
		if lk == "content-md5" || lk == "content-type" || strings.HasPrefix(lk, "x-oss-") || contains(additional, lk) {
			hv[lk] = strings.Trim(v[0], " ")
		}
	}
	if contains(additional, "host") {
		hv["host"] = r.Host
	}
	names := make([]string, 0, len(hv))
	for k := range hv {
		names = append(names, k)
	}
	sort.Strings(names)
	var ch strings.Builder
	for _, k := range names {
		ch.WriteString(k + ":" + hv[k] + "\n")
	}
	q := r.URL.Query()
	type kv struct{ k, v string }
	var params []kv
	for k, vs := range q {
		if presigned && k == "x-oss-signature" {
			continue
		}
		v := ""
		if len(vs) > 0 && vs[0] != "" {
			v = ossEscape(vs[0])
		}
		params = append(params, kv{url.QueryEscape(k), v})
	}
	sort.Slice(params, func(i, j int) bool { return params[i].k < params[j].k })
	var sub []string
	for _, p := range params {
		if p.v != "" {
			sub = append(sub, p.k+"="+p.v)
		} else {
			sub = append(sub, p.k)
		}
	}
	res := "/"
	if rc.bucket != "" {
		res = "/" + rc.bucket + "/" + strings.ReplaceAll(ossEscape(rc.key), "%2F", "/")
	}
	payload := "UNSIGNED-PAYLOAD"
	if v := r.Header.Get("x-oss-content-sha256"); v != "" {
		payload = v
	}
	signDate := r.Header.Get("Date")
	if v := r.Header.Get("x-oss-date"); v != "" {
		signDate = v
	}
	if presigned {
		signDate = q.Get("x-oss-date")
	}
	creq := r.Method + "\n" + res + "\n" + strings.Join(sub, "&") + "\n" + ch.String() + "\n" + strings.Join(additional, ";") + "\n" + payload
	ch2 := sha256.Sum256([]byte(creq))
	scope := day + "/" + region + "/" + product + "/aliyun_v4_request"
	sts := "OSS4-HMAC-SHA256\n" + signDate + "\n" + scope + "\n" + hex.EncodeToString(ch2[:])
	return hex.EncodeToString(hmacSum(sha256.New, ossV4Key(secret, cred), sts)), nil
}

// ossV4Key derives OSS V4's signing key from a credential's fields
// (AK/DATE/REGION/PRODUCT/aliyun_v4_request).
func ossV4Key(secret string, cred []string) []byte {
	k := hmacSum(sha256.New, []byte("aliyun_v4"+secret), cred[1])
	k = hmacSum(sha256.New, k, cred[2])
	k = hmacSum(sha256.New, k, cred[3])
	return hmacSum(sha256.New, k, "aliyun_v4_request")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// s3V2SignedParams are the sub-resources S3 signature V2 signs.
var s3V2SignedParams = map[string]bool{
	"acl": true, "cors": true, "delete": true, "lifecycle": true, "location": true, "logging": true,
	"notification": true, "partNumber": true, "policy": true, "requestPayment": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
	"response-content-language": true, "response-content-type": true, "response-expires": true,
	"restore": true, "tagging": true, "torrent": true, "uploadId": true, "uploads": true, "versionId": true,
	"versioning": true, "versions": true, "website": true,
}

// s3V2Signature is base64(HMAC-SHA1(secret, VERB\nContent-MD5\nContent-Type\n
// Date\nCanonicalizedAmzHeaders CanonicalizedResource)), the resource being
// the path as sent (with /bucket in front for a virtual-hosted request, and
// a '/' added to a bare "/bucket" when bucketSlash).
func s3V2Signature(r *http.Request, rc *reqCtx, date, secret string, bucketSlash bool) string {
	var names []string
	for k := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-") {
			names = append(names, lk)
		}
	}
	sort.Strings(names)
	var hdrs strings.Builder
	for _, k := range names {
		vals := r.Header.Values(k)
		for i := range vals {
			vals[i] = strings.TrimSpace(vals[i])
		}
		hdrs.WriteString(k + ":" + strings.Join(vals, ",") + "\n")
	}
	path, _, _ := strings.Cut(r.RequestURI, "?")
	if strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://") {
		path = r.URL.EscapedPath()
	}
	res := path
	if rc.vhost {
		res = "/" + rc.bucket + path
	}
	if bucketSlash && !strings.HasSuffix(res, "/") {
		res += "/"
	}
	q := r.URL.Query()
	var keys []string
	for k := range q {
		if s3V2SignedParams[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		res += sep + k
		if v := q.Get(k); v != "" {
			res += "=" + v
		}
	}
	sts := r.Method + "\n" + r.Header.Get("Content-MD5") + "\n" + r.Header.Get("Content-Type") + "\n" + date + "\n" + hdrs.String() + res
	return base64.StdEncoding.EncodeToString(hmacSum(sha1.New, []byte(secret), sts))
}

// awsEscape is SigV4's URI encoding: every byte but A-Z a-z 0-9 - _ . ~
// percent-encoded, and '/' too unless keepSlash.
func awsEscape(s string, keepSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// s3V4Signature computes an AWS4-HMAC-SHA256 signature as S3 checks it:
// the path URI-encoded once (S3 does not normalize it), the query sorted
// and encoded, the signed headers, and x-amz-content-sha256 as the payload
// hash (UNSIGNED-PAYLOAD for a presigned URL without it).
func s3V4Signature(r *http.Request, fields map[string]string, presigned bool, secret string) (string, *authError) {
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[4] != "aws4_request" {
		return "", &authError{http.StatusBadRequest, "AuthorizationHeaderMalformed", "malformed Credential: want AK/DATE/REGION/SERVICE/aws4_request"}
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var ch strings.Builder
	for _, h := range signed {
		var vals []string
		switch h {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = r.Header.Values(h)
			if len(vals) == 0 {
				vals = []string{strconv.FormatInt(r.ContentLength, 10)}
			}
		case "transfer-encoding":
			vals = r.TransferEncoding
		default:
			vals = r.Header.Values(h)
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		ch.WriteString(h + ":" + strings.Join(vals, ",") + "\n")
	}
	type kv struct{ k, v string }
	var params []kv
	if r.URL.RawQuery != "" {
		for _, p := range strings.Split(r.URL.RawQuery, "&") {
			k, v, _ := strings.Cut(p, "=")
			dk, err1 := url.QueryUnescape(k)
			dv, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				dk, dv = k, v
			}
			if presigned && dk == "X-Amz-Signature" {
				continue
			}
			params = append(params, kv{awsEscape(dk, false), awsEscape(dv, false)})
		}
	}
	sort.Slice(params, func(i, j int) bool {
		if params[i].k != params[j].k {
			return params[i].k < params[j].k
		}
		return params[i].v < params[j].v
	})
	var cq []string
	for _, p := range params {
		cq = append(cq, p.k+"="+p.v)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	date := r.Header.Get("X-Amz-Date")
	if presigned {
		date = r.URL.Query().Get("X-Amz-Date")
	} else if date == "" {
		date = r.Header.Get("Date")
	}
	creq := r.Method + "\n" + awsEscape(r.URL.Path, true) + "\n" + strings.Join(cq, "&") + "\n" + ch.String() + "\n" + fields["SignedHeaders"] + "\n" + payload
	sum := sha256.Sum256([]byte(creq))
	scope := strings.Join(cred[1:], "/")
	sts := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	return hex.EncodeToString(hmacSum(sha256.New, s3V4Key(secret, cred), sts)), nil
}
