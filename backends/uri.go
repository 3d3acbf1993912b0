package backends

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// Schemes mlfsd understands. "file" is accepted as an alias of "nas".
const (
	SchemeOSS  = "oss"
	SchemeHDFS = "hdfs"
	SchemeNAS  = "nas"
	SchemeS3   = "s3"
)

// URI names a channel's data: a directory (a URI ending in '/') or a single
// object. Forms:
//
//	oss://bucket/prefix/            endpoint from configuration
//	oss://bucket.endpoint/prefix/   as PAI prints them
//	hdfs://namenode:port/path/      several namenodes: hdfs://nn1:8020,nn2:8020/path/
//	hdfs://nameservice/path/        a lone host without a port: an HA
//	                                nameservice from the Hadoop configuration,
//	                                else a namenode on port 8020
//	nas:///abs/path/                alias file:///abs/path/
//	s3://bucket/prefix/             endpoint, region and addressing from
//	                                configuration (AWS S3 by default)
//	s3://bucket/prefix/?endpoint=http://minio:9000&region=us-east-1&path_style=true&profile=minio
//	                                an S3-compatible store named in the URI
//
// The s3 scheme alone takes a query, and only the parameters endpoint
// (host[:port], with an optional http:// or https://), region, path_style
// (true or false) and profile (a section of the credentials file, never a
// credential itself): S3 bucket names may contain dots, so the
// oss bucket.endpoint form would be ambiguous, and one node may reach two
// S3 stores at once (the shared cache tier in-cluster, a dataset on AWS).
type URI struct {
	// Scheme is one of SchemeOSS, SchemeHDFS, SchemeNAS, SchemeS3.
	Scheme string
	// Bucket is the OSS or S3 bucket (OSS and S3 only).
	Bucket string
	// Endpoint is the OSS endpoint given in the host (bucket.endpoint form),
	// or the S3 endpoint given as the endpoint parameter, or "" when it
	// comes from configuration.
	Endpoint string
	// Region is the S3 region given as the region parameter, or "" when it
	// comes from configuration (S3 only).
	Region string
	// PathStyle is the S3 path_style parameter: "true", "false", or "" when
	// it comes from configuration (S3 only).
	PathStyle string
	// Profile is the S3 profile parameter: the section of the credentials
	// file whose key reaches this store, so that one node can hold keys
	// for two stores (S3 only; "" for the node's default credentials).
	Profile string
	// Hosts are the HDFS namenode addresses (HDFS only).
	Hosts []string
	// Path is the object path, always starting with '/'; it ends with '/'
	// exactly when the URI names a directory.
	Path string
}

// ParseURI parses and validates a channel URI. Only the forms above are
// accepted, literally: "nas:out/" or "file:/etc/" would otherwise name the
// host's root directory. Errors name the URI and what is wrong with it; text
// taken from the URI is always quoted, so a newline in it (raw or %0A)
// cannot forge a log line. Credentials embedded in a URI are refused and
// never repeated, so they can never reach a log line or the job environment
// by way of a URI.
func ParseURI(s string) (URI, error) {
	if s == "" {
		return URI{}, errors.New("empty URI")
	}
	q := redact(s)
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "/?#") {
		return URI{}, fmt.Errorf("URI %q has no scheme; want oss://, s3://, hdfs://, nas:// or file://", q)
	}
	var out URI
	switch strings.ToLower(scheme) {
	case "oss":
		out.Scheme = SchemeOSS
	case "hdfs":
		out.Scheme = SchemeHDFS
	case "nas", "file":
		out.Scheme = SchemeNAS
	case "s3":
		out.Scheme = SchemeS3
	default:
		return URI{}, fmt.Errorf("URI %q: unknown scheme %q; want oss, s3, hdfs, nas or file", q, scheme)
	}
	scheme = strings.ToLower(scheme)
	form := forms[scheme]
	rest, ok = strings.CutPrefix(rest, "//")
	if !ok {
		return URI{}, fmt.Errorf("URI %q: want %s", q, form)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return URI{}, fmt.Errorf("URI %q: control character %q not allowed", q, c)
		}
	}
	rawQuery, hasQuery := "", false
	if out.Scheme == SchemeS3 {
		if i := strings.IndexByte(rest, '?'); i >= 0 && !strings.Contains(rest[:i], "#") {
			rest, rawQuery, hasQuery = rest[:i], rest[i+1:], true
		}
	}
	authority, rawPath := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, rawPath = rest[:i], rest[i:]
	}
	if strings.Contains(authority, "@") {
		return URI{}, fmt.Errorf("URI %q: credentials in a URI are not accepted; use the environment or a credentials file", q)
	}
	if hasQuery {
		if strings.Contains(rawQuery, "#") {
			return URI{}, fmt.Errorf("URI %q: a fragment is not supported (escape '#' as %%23)", q)
		}
		if err := out.parseS3Query(rawQuery); err != nil {
			return URI{}, fmt.Errorf("URI %q: %v", q, err)
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		what := "query"
		if rest[i] == '#' {
			what = "fragment"
		}
		return URI{}, fmt.Errorf("URI %q: a %s is not supported (escape '?' as %%3F and '#' as %%23)", q, what)
	}
	p, err := url.PathUnescape(rawPath)
	if err != nil {
		return URI{}, fmt.Errorf("URI %q: bad escape in path: %v", q, err)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return URI{}, fmt.Errorf("URI %q: control character %q not allowed in the path", q, r)
		}
	}
	if p == "" {
		p = "/"
	}
	if err := checkClean(p); err != nil {
		return URI{}, fmt.Errorf("URI %q: %v", q, err)
	}
	out.Path = p

	switch out.Scheme {
	case SchemeOSS:
		if authority == "" || authority[0] == '.' || authority[0] == ':' {
			return URI{}, fmt.Errorf("URI %q: missing bucket (want %s)", q, form)
		}
		bucket, endpoint, hasEndpoint := strings.Cut(authority, ".")
		if !validBucket(bucket) {
			return URI{}, fmt.Errorf("URI %q: invalid bucket name %q (3-63 characters of a-z, 0-9 and '-', not starting or ending with '-')", q, bucket)
		}
		if hasEndpoint {
			if endpoint == "" {
				return URI{}, fmt.Errorf("URI %q: empty endpoint after bucket", q)
			}
			if err := checkHostPort(endpoint, false); err != nil {
				return URI{}, fmt.Errorf("URI %q: invalid endpoint %q: %v", q, endpoint, err)
			}
		}
		out.Bucket, out.Endpoint = bucket, endpoint
	case SchemeS3:
		if authority == "" {
			return URI{}, fmt.Errorf("URI %q: missing bucket (want %s)", q, form)
		}
		if !validS3Bucket(authority) {
			return URI{}, fmt.Errorf("URI %q: invalid bucket name %q (3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit)", q, authority)
		}
		out.Bucket = authority
	case SchemeHDFS:
		if authority == "" {
			return URI{}, fmt.Errorf("URI %q: missing namenode (want %s)", q, form)
		}
		hosts := strings.Split(authority, ",")
		for _, h := range hosts {
			if h == "" {
				return URI{}, fmt.Errorf("URI %q: empty namenode address in list", q)
			}
			// A lone host without a port is a nameservice (or a namenode
			// on the default port); in a list each needs its port.
			if err := checkHostPort(h, len(hosts) > 1); err != nil {
				return URI{}, fmt.Errorf("URI %q: invalid namenode address %q: %v", q, h, err)
			}
			out.Hosts = append(out.Hosts, h)
		}
	case SchemeNAS:
		if authority != "" {
			return URI{}, fmt.Errorf("URI %q: a %s URI takes no host (want %s)", q, scheme, form)
		}
		if rawPath == "" {
			return URI{}, fmt.Errorf("URI %q: want %s", q, form)
		}
		if p == "/" {
			return URI{}, fmt.Errorf("URI %q names the host's root directory; name the directory to mount (want %s)", q, form)
		}
	}
	return out, nil
}

// forms are the documented URI forms, by scheme, for error messages.
var forms = map[string]string{
	"oss":  "oss://bucket/prefix/ or oss://bucket.endpoint/prefix/",
	"s3":   "s3://bucket/prefix/ or s3://bucket/prefix/?endpoint=host:port&region=r&path_style=true&profile=p",
	"hdfs": "hdfs://namenode:port/path/",
	"nas":  "nas:///abs/path/",
	"file": "file:///abs/path/",
}

// redact hides the userinfo of s (anything before an '@' in the
// authority) and the value of any query parameter that looks like a
// credential, so an error about a URI never repeats a secret in it.
func redact(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		params := strings.Split(s[i+1:], "&")
		for j, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && looksSecret(k) {
				params[j] = k + "=***"
			}
		}
		s = s[:i+1] + strings.Join(params, "&")
	}
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return s
	}
	head := s[:len(s)-len(rest)]
	return head + "***" + rest[at:]
}

// looksSecret reports whether a query parameter's name (raw or escaped)
// looks like it carries a credential.
func looksSecret(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	for _, w := range []string{"key", "secret", "token", "password", "credential", "signature"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// checkHostPort validates host[:port]: a DNS name or IPv4 address, or an
// IPv6 address in brackets; the port, when present (needPort: required), a
// number from 1 to 65535.
func checkHostPort(hp string, needPort bool) error {
	host, port := hp, ""
	hasPort := false
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return errors.New("unclosed '[' in IPv6 address")
		}
		host = hp[1:end]
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return fmt.Errorf("invalid IPv6 address %q", host)
		}
		switch tail := hp[end+1:]; {
		case tail == "":
		case tail[0] == ':':
			port, hasPort = tail[1:], true
		default:
			return fmt.Errorf("unexpected %q after the IPv6 address", tail)
		}
	} else {
		if i := strings.LastIndexByte(hp, ':'); i >= 0 {
			host, port, hasPort = hp[:i], hp[i+1:], true
		}
		if host == "" {
			return errors.New("empty host")
		}
		if !validHostname(host) {
			return fmt.Errorf("invalid host %q (want a DNS name or an IP address)", host)
		}
	}
	switch {
	case hasPort && port == "":
		return errors.New("empty port after ':'")
	case !hasPort && needPort:
		return errors.New("missing port (want host:port, e.g. nn1:8020)")
	case hasPort:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return fmt.Errorf("invalid port %q (want 1 to 65535)", port)
		}
	}
	return nil
}

// validHostname accepts DNS names (letters, digits, '-' in dot-separated
// labels of 1 to 63 characters, not starting or ending with '-') and IPv4
// addresses.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// checkClean refuses "." and ".." segments and empty segments, which would
// make a URI name something other than what it reads as.
func checkClean(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("path must be absolute")
	}
	trimmed := strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
	if trimmed == "" {
		return nil
	}
	for _, seg := range strings.Split(trimmed, "/") {
		switch seg {
		case "":
			return errors.New(`empty path segment ("//")`)
		case ".", "..":
			return fmt.Errorf("path segment %q not allowed", seg)
		}
	}
	return nil
}

// validS3Bucket accepts S3's general purpose bucket names (3-63 of a-z,
// 0-9, '.' and '-', beginning and ending with a letter or digit, no ".."),
// which include S3 Express directory bucket names (base--azid--x-s3).
func validS3Bucket(b string) bool {
	if len(b) < 3 || len(b) > 63 || strings.Contains(b, "..") {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// s3Params are the query parameters an s3:// URI takes.
var s3Params = []string{"endpoint", "path_style", "profile", "region"}

// parseS3Query sets the S3 parameters of u from the query of an s3:// URI.
// Each may appear once; anything else is refused, and a parameter that
// looks like a credential is refused without repeating its value.
func (u *URI) parseS3Query(raw string) error {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Errorf("bad query: %v", err)
	}
	for k, vs := range vals {
		if looksSecret(k) {
			return errors.New("credentials in a URI are not accepted; use the environment or a credentials file")
		}
		if len(vs) != 1 {
			return fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "endpoint":
			if err := checkS3Endpoint(v); err != nil {
				return fmt.Errorf("invalid endpoint %q: %v", v, err)
			}
			u.Endpoint = v
		case "region":
			if !validRegion(v) {
				return fmt.Errorf("invalid region %q (want letters, digits and '-', like us-east-1)", v)
			}
			u.Region = v
		case "path_style":
			if v != "true" && v != "false" {
				return fmt.Errorf("path_style %q: want true or false", v)
			}
			u.PathStyle = v
		case "profile":
			if !validProfile(v) {
				return fmt.Errorf("invalid profile %q (want letters, digits, '-', '_' and '.')", v)
			}
			u.Profile = v
		default:
			return fmt.Errorf("unknown query parameter %q (an s3:// URI takes %s)", k, strings.Join(s3Params, ", "))
		}
	}
	return nil
}

// checkS3Endpoint validates an S3 endpoint: host[:port], optionally after
// http:// or https://, with no path.
func checkS3Endpoint(ep string) error {
	hp := ep
	if s, rest, ok := strings.Cut(ep, "://"); ok {
		if s != "http" && s != "https" {
			return errors.New("scheme must be http or https")
		}
		hp = rest
	}
	hp = strings.TrimSuffix(hp, "/")
	if hp == "" || strings.ContainsAny(hp, "/?#@ ") {
		return errors.New("want host[:port] with an optional http:// or https://")
	}
	return checkHostPort(hp, false)
}

func validProfile(p string) bool {
	if p == "" || len(p) > 64 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 || b[0] == '-' || b[len(b)-1] == '-' {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// IsDir reports whether the URI names a directory channel.
func (u URI) IsDir() bool { return strings.HasSuffix(u.Path, "/") }

// Base is the last path element of a single-object URI ("" for a directory).
func (u URI) Base() string {
	if u.IsDir() {
		return ""
	}
	return path.Base(u.Path)
}

// Dir returns the URI of the directory holding a single object; a directory
// URI is returned unchanged.
func (u URI) Dir() URI {
	if u.IsDir() {
		return u
	}
	d := u
	d.Path = path.Dir(u.Path)
	if !strings.HasSuffix(d.Path, "/") {
		d.Path += "/"
	}
	return d
}

// Join returns the directory URI u with rel appended as a sub-directory.
func (u URI) Join(rel string) URI {
	d := u.Dir()
	d.Path = strings.TrimSuffix(d.Path, "/") + "/" + strings.Trim(rel, "/") + "/"
	return d
}

// String formats the URI canonically (file:// becomes nas://).
func (u URI) String() string {
	var host string
	switch u.Scheme {
	case SchemeOSS:
		host = u.Bucket
		if u.Endpoint != "" {
			host += "." + u.Endpoint
		}
	case SchemeS3:
		host = u.Bucket
	case SchemeHDFS:
		host = strings.Join(u.Hosts, ",")
	}
	s := u.Scheme + "://" + host + (&url.URL{Path: u.Path}).EscapedPath()
	if u.Scheme == SchemeS3 {
		q := url.Values{}
		if u.Endpoint != "" {
			q.Set("endpoint", u.Endpoint)
		}
		if u.Region != "" {
			q.Set("region", u.Region)
		}
		if u.PathStyle != "" {
			q.Set("path_style", u.PathStyle)
		}
		if u.Profile != "" {
			q.Set("profile", u.Profile)
		}
		if len(q) > 0 {
			s += "?" + q.Encode()
		}
	}
	return s
}

// RedactURI hides what may be a credential in a URI-like string s: its
// userinfo and the values of query parameters named like a key, secret,
// token or password. Callers that log text a user wrote (a CSI volume's
// attributes) pass every URI in it through here; a URI ParseURI accepted
// holds no such thing.
func RedactURI(s string) string { return redact(s) }
