package ossemu

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultSTSDuration is the lifetime of the keys the emulator's STS and
// metadata endpoints issue when Options.STSDuration is zero.
const DefaultSTSDuration = time.Hour

// TempKey is a short-lived key the emulator issued (STS, instance
// metadata, a credentials URI). Requests signed with it must carry its
// token, and are refused with the store's expired-token error once it
// expires. String hides the secret and the token.
type TempKey struct {
	AccessKeyID, AccessKeySecret, SecurityToken string
	Expires                                     time.Time
}

func (k TempKey) String() string { return "ossemu.TempKey{" + k.AccessKeyID + ", redacted}" }

// GoString hides the secret from %#v as well.
func (k TempKey) GoString() string { return k.String() }

// IssueKey mints a temporary key that lives for d (Options.STSDuration
// when d is zero): what each STS and metadata answer hands out, for tests
// that want one directly.
func (s *Server) IssueKey(d time.Duration) TempKey {
	if d <= 0 {
		d = s.stsDuration()
	}
	k := TempKey{
		AccessKeyID:     "STS." + randHex(10),
		AccessKeySecret: randHex(20),
		SecurityToken:   "CAIS" + randHex(48),
		Expires:         time.Now().Add(d),
	}
	s.mu.Lock()
	// Keys long expired are forgotten, so a long run's map stays small
	// (a day after expiry nobody holds them).
	for id, old := range s.tempKeys {
		if time.Since(old.Expires) > 24*time.Hour {
			delete(s.tempKeys, id)
		}
	}
	s.tempKeys[k.AccessKeyID] = k
	s.mu.Unlock()
	s.count("sts.issued")
	return k
}

func (s *Server) stsDuration() time.Duration {
	if s.opt.STSDuration > 0 {
		return s.opt.STSDuration
	}
	return DefaultSTSDuration
}

// tempKey returns the issued key ak names.
func (s *Server) tempKey(ak string) (TempKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.tempKeys[ak]
	return k, ok
}

// keySecret returns the secret to check a request signed with ak
// against: the configured pair's, or an issued key's, after checking that
// the request carries the key's token and that the key has not expired
// (the codes OSS and S3 answer: SecurityTokenExpired, ExpiredToken).
func (s *Server) keySecret(r *http.Request, rc *reqCtx, ak string) (string, *Key, *authError) {
	if s.opt.AccessKeyID == "" && len(s.opt.Keys) == 0 {
		return s.opt.AccessKeySecret, nil, nil
	}
	// The configured pairs, each with its access rules (access.go).
	if secret, ruled, known := s.secretOf(ak); known {
		return secret, ruled, nil
	}
	k, ok := s.tempKey(ak)
	if !ok {
		if rc.s3 {
			return "", nil, denied("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
		}
		return "", nil, denied("InvalidAccessKeyId", "The OSS Access Key Id you provided does not exist in our records.")
	}
	q := r.URL.Query()
	var tok string
	if rc.s3 {
		tok = firstNonEmpty(r.Header.Get("X-Amz-Security-Token"), q.Get("X-Amz-Security-Token"))
	} else {
		tok = firstNonEmpty(r.Header.Get("x-oss-security-token"), q.Get("security-token"), q.Get("x-oss-security-token"))
	}
	if tok != k.SecurityToken {
		if rc.s3 {
			return "", nil, denied("InvalidToken", "The provided token is malformed or otherwise invalid.")
		}
		return "", nil, denied("InvalidSecurityToken", "The security token you provided is invalid.")
	}
	if time.Now().After(k.Expires) {
		s.count("sts.expired")
		if rc.s3 {
			return "", nil, &authError{http.StatusBadRequest, "ExpiredToken", "The provided token has expired."}
		}
		return "", nil, denied("SecurityTokenExpired", "The security token you provided has expired.")
	}
	return k.AccessKeySecret, nil, nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// isSTS tells an STS call (an RPC-style Action, in the query as Alibaba
// Cloud's SDKs send it or in a form body as AWS's do) from an OSS/S3
// request to the service root (a request to a virtual-hosted bucket's
// root is never one: the caller checks).
func isSTS(r *http.Request) bool {
	if r.URL.Path != "/" && r.URL.Path != "" {
		return false
	}
	if r.URL.Query().Get("Action") != "" {
		return true
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return r.Method == http.MethodPost && strings.TrimSpace(ct) == "application/x-www-form-urlencoded"
}

// serveSTS answers the STS actions: Alibaba Cloud's AssumeRoleWithOIDC and
// AssumeRole (JSON, API version 2015-04-01) and AWS's
// AssumeRoleWithWebIdentity (XML, 2011-06-15). Each issues a TempKey.
func (s *Server) serveSTS(w http.ResponseWriter, r *http.Request, id string) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		writeSTSJSONError(w, http.StatusBadRequest, id, "InvalidParameter", "cannot parse the request: "+err.Error())
		return
	}
	p := r.Form // query and body together
	action := p.Get("Action")
	s.count("sts." + action)
	switch action {
	case "AssumeRoleWithOIDC":
		s.alibabaAssume(w, r, id, p, false)
	case "AssumeRole":
		s.alibabaAssume(w, r, id, p, true)
	case "AssumeRoleWithWebIdentity":
		s.awsAssumeWebIdentity(w, id, p)
	default:
		if p.Get("Version") == "2011-06-15" {
			writeSTSXMLError(w, http.StatusBadRequest, id, "InvalidAction", fmt.Sprintf("Could not find operation %s for version 2011-06-15", action))
			return
		}
		writeSTSJSONError(w, http.StatusBadRequest, id, "InvalidAction.NotFound", fmt.Sprintf("Specified api %q is not found, please check your url and method.", action))
	}
}

// duration is the lifetime of a key asked for durationSeconds: the
// configured lifetime, or less when the caller asks for less.
func (s *Server) duration(durationSeconds string) time.Duration {
	d := s.stsDuration()
	if n, err := strconv.Atoi(durationSeconds); err == nil && n > 0 && time.Duration(n)*time.Second < d {
		d = time.Duration(n) * time.Second
	}
	return d
}

// roleAllowed tells whether the emulator lets arn be assumed: any role
// of the right form when Options.STSRoles is empty, else the listed ones.
func (s *Server) roleAllowed(arn string) bool {
	return len(s.opt.STSRoles) == 0 || slices.Contains(s.opt.STSRoles, arn)
}

type aliCredentials struct {
	AccessKeyID     string `json:"AccessKeyId"`
	AccessKeySecret string `json:"AccessKeySecret"`
	SecurityToken   string `json:"SecurityToken"`
	Expiration      string `json:"Expiration"`
}

type aliAssumeResponse struct {
	RequestID       string `json:"RequestId"`
	AssumedRoleUser struct {
		Arn           string `json:"Arn"`
		AssumedRoleID string `json:"AssumedRoleId"`
	} `json:"AssumedRoleUser"`
	Credentials   aliCredentials    `json:"Credentials"`
	OIDCTokenInfo map[string]string `json:"OIDCTokenInfo,omitempty"`
}

// alibabaAssume is AssumeRoleWithOIDC (signed by nobody: the OIDC token
// is the proof) or AssumeRole (an RPC signature, HMAC-SHA1, under the
// emulator's configured key pair).
func (s *Server) alibabaAssume(w http.ResponseWriter, r *http.Request, id string, p url.Values, signed bool) {
	role := p.Get("RoleArn")
	var claims map[string]any
	if signed {
		if code, msg := s.checkRPCSignature(r, p); code != "" {
			writeSTSJSONError(w, http.StatusBadRequest, id, code, msg)
			return
		}
	} else {
		if p.Get("OIDCProviderArn") == "" {
			writeSTSJSONError(w, http.StatusBadRequest, id, "MissingOIDCProviderArn", "OIDCProviderArn is mandatory for this action.")
			return
		}
		var code, msg string
		claims, code, msg = checkJWT(p.Get("OIDCToken"))
		if code != "" {
			writeSTSJSONError(w, http.StatusBadRequest, id, "AuthenticationFail.OIDCToken."+code, msg)
			return
		}
	}
	if !strings.HasPrefix(role, "acs:ram::") || !strings.Contains(role, ":role/") {
		writeSTSJSONError(w, http.StatusBadRequest, id, "InvalidParameter.RoleArn", fmt.Sprintf("The parameter RoleArn %q is wrongly formed: want acs:ram::<account>:role/<name>.", role))
		return
	}
	if !s.roleAllowed(role) {
		writeSTSJSONError(w, http.StatusNotFound, id, "EntityNotExist.Role", "The role not exists: "+role+".")
		return
	}
	k := s.IssueKey(s.duration(p.Get("DurationSeconds")))
	var out aliAssumeResponse
	out.RequestID = id
	out.AssumedRoleUser.Arn = role + "/" + p.Get("RoleSessionName")
	out.AssumedRoleUser.AssumedRoleID = randHex(8) + ":" + p.Get("RoleSessionName")
	out.Credentials = aliCredentials{k.AccessKeyID, k.AccessKeySecret, k.SecurityToken, k.Expires.UTC().Format("2006-01-02T15:04:05Z")}
	if claims != nil {
		out.OIDCTokenInfo = map[string]string{"Subject": fmt.Sprint(claims["sub"]), "Issuer": fmt.Sprint(claims["iss"])}
	}
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	_ = json.NewEncoder(w).Encode(out)
}

// checkRPCSignature verifies Alibaba Cloud's RPC signature (SignatureMethod
// HMAC-SHA1, version 1.0): base64(HMAC-SHA1(secret+"&", METHOD&%2F&
// percent(sorted params))) over the query and form parameters but the
// Signature itself. It returns the error code STS would, or "".
func (s *Server) checkRPCSignature(r *http.Request, p url.Values) (code, msg string) {
	ak := p.Get("AccessKeyId")
	secret := ""
	switch k, ok := s.tempKey(ak); {
	case s.opt.AccessKeyID != "" && ak == s.opt.AccessKeyID:
		secret = s.opt.AccessKeySecret
	case ok:
		if p.Get("SecurityToken") != k.SecurityToken {
			return "InvalidSecurityToken.Malformed", "Specified SecurityToken is malformed."
		}
		if time.Now().After(k.Expires) {
			return "InvalidSecurityToken.Expired", "Specified SecurityToken is expired."
		}
		secret = k.AccessKeySecret
	default:
		return "InvalidAccessKeyId.NotFound", "Specified access key is not found."
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		if k != "Signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, rpcEscape(k)+"="+rpcEscape(p.Get(k)))
	}
	sts := r.Method + "&%2F&" + rpcEscape(strings.Join(parts, "&"))
	want := base64.StdEncoding.EncodeToString(hmacSum(sha1.New, []byte(secret+"&"), sts))
	if p.Get("Signature") != want {
		return "SignatureDoesNotMatch", "Specified signature is not matched with our calculation."
	}
	return "", ""
}

// rpcEscape is the RPC signature's percent-encoding (RFC 3986: spaces as
// %20, '*' as %2A, '~' kept).
func rpcEscape(v string) string {
	e := url.QueryEscape(v)
	e = strings.ReplaceAll(e, "+", "%20")
	e = strings.ReplaceAll(e, "*", "%2A")
	return strings.ReplaceAll(e, "%7E", "~")
}

// checkJWT checks what the emulator can of an OIDC token without the
// issuer's keys: three base64url parts, a JSON payload, and an "exp" (if
// any) not past. It returns the claims, or the error code suffix and
// message.
func checkJWT(tok string) (map[string]any, string, string) {
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return nil, "Missing", "OIDCToken is mandatory for this action."
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, "Invalid", "The OIDC token is not a JWT (want header.payload.signature)."
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	var claims map[string]any
	if err != nil || json.Unmarshal(raw, &claims) != nil {
		return nil, "Invalid", "The OIDC token's payload is not base64url-encoded JSON."
	}
	if exp, ok := claims["exp"].(float64); ok && time.Now().After(time.Unix(int64(exp), 0)) {
		return nil, "Expired", fmt.Sprintf("The OIDC token expired at %s.", time.Unix(int64(exp), 0).UTC().Format(time.RFC3339))
	}
	return claims, "", ""
}

type stsJSONError struct {
	RequestID string `json:"RequestId"`
	HostID    string `json:"HostId"`
	Code      string `json:"Code"`
	Message   string `json:"Message"`
}

func writeSTSJSONError(w http.ResponseWriter, status int, id, code, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(stsJSONError{RequestID: id, HostID: "sts.aliyuncs.com", Code: code, Message: msg})
}

type awsSTSError struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

func writeSTSXMLError(w http.ResponseWriter, status int, id, code, msg string) {
	var e awsSTSError
	e.Xmlns = "https://sts.amazonaws.com/doc/2011-06-15/"
	e.Error.Type, e.Error.Code, e.Error.Message = "Sender", code, msg
	e.RequestID = id
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(e)
}

type awsWebIdentityResponse struct {
	XMLName xml.Name `xml:"AssumeRoleWithWebIdentityResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		Credentials struct {
			AccessKeyID     string `xml:"AccessKeyId"`
			SecretAccessKey string `xml:"SecretAccessKey"`
			SessionToken    string `xml:"SessionToken"`
			Expiration      string `xml:"Expiration"`
		} `xml:"Credentials"`
		SubjectFromWebIdentityToken string `xml:"SubjectFromWebIdentityToken"`
		AssumedRoleUser             struct {
			Arn           string `xml:"Arn"`
			AssumedRoleID string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
		Audience string `xml:"Audience"`
		Provider string `xml:"Provider"`
	} `xml:"AssumeRoleWithWebIdentityResult"`
	RequestID string `xml:"ResponseMetadata>RequestId"`
}

// awsAssumeWebIdentity is AWS STS's AssumeRoleWithWebIdentity.
func (s *Server) awsAssumeWebIdentity(w http.ResponseWriter, id string, p url.Values) {
	role := p.Get("RoleArn")
	if !strings.HasPrefix(role, "arn:aws:iam::") || !strings.Contains(role, ":role/") {
		writeSTSXMLError(w, http.StatusBadRequest, id, "ValidationError", fmt.Sprintf("%s is invalid: want arn:aws:iam::<account>:role/<name>", role))
		return
	}
	claims, code, msg := checkJWT(p.Get("WebIdentityToken"))
	switch code {
	case "":
	case "Expired":
		writeSTSXMLError(w, http.StatusBadRequest, id, "ExpiredTokenException", "Token expired: "+msg)
		return
	default:
		writeSTSXMLError(w, http.StatusBadRequest, id, "InvalidIdentityToken", msg)
		return
	}
	if !s.roleAllowed(role) {
		writeSTSXMLError(w, http.StatusForbidden, id, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity on "+role)
		return
	}
	k := s.IssueKey(s.duration(p.Get("DurationSeconds")))
	var out awsWebIdentityResponse
	out.Xmlns = "https://sts.amazonaws.com/doc/2011-06-15/"
	c := &out.Result.Credentials
	c.AccessKeyID, c.SecretAccessKey, c.SessionToken = k.AccessKeyID, k.AccessKeySecret, k.SecurityToken
	c.Expiration = k.Expires.UTC().Format(time.RFC3339)
	out.Result.SubjectFromWebIdentityToken = fmt.Sprint(claims["sub"])
	out.Result.AssumedRoleUser.Arn = role + "/" + p.Get("RoleSessionName")
	out.Result.AssumedRoleUser.AssumedRoleID = randHex(8) + ":" + p.Get("RoleSessionName")
	out.Result.Audience = fmt.Sprint(claims["aud"])
	out.Result.Provider = fmt.Sprint(claims["iss"])
	out.RequestID = id
	w.Header().Set("Content-Type", "text/xml")
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(out)
}
