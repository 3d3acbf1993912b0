package backends

import (
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Schemes mlfsd understands. "file" is accepted as an alias of "nas".
const (
	SchemeOSS  = "oss"
	SchemeHDFS = "hdfs"
	SchemeNAS  = "nas"
)

// URI names a channel's data: a directory (a URI ending in '/') or a single
// object. Forms:
//
//	oss://bucket/prefix/            endpoint from configuration
//	oss://bucket.endpoint/prefix/   as PAI prints them
//	hdfs://namenode:port/path/      several namenodes: hdfs://nn1:8020,nn2:8020/path/
//	nas:///abs/path/                alias file:///abs/path/
type URI struct {
	// Scheme is one of SchemeOSS, SchemeHDFS, SchemeNAS.
	Scheme string
	// Bucket is the OSS bucket (OSS only).
	Bucket string
	// Endpoint is the OSS endpoint given in the host (bucket.endpoint form),
	// or "" when it comes from configuration.
	Endpoint string
	// Hosts are the HDFS namenode addresses (HDFS only).
	Hosts []string
	// Path is the object path, always starting with '/'; it ends with '/'
	// exactly when the URI names a directory.
	Path string
}

// ParseURI parses and validates a channel URI. Errors name the URI and what
// is wrong with it. Credentials embedded in a URI are refused, so they can
// never reach a log line or the job environment by way of a URI.
func ParseURI(s string) (URI, error) {
	if s == "" {
		return URI{}, fmt.Errorf("empty URI")
	}
	u, err := url.Parse(s)
	if err != nil {
		return URI{}, fmt.Errorf("malformed URI %q: %v", s, err)
	}
	if u.User != nil {
		return URI{}, fmt.Errorf("URI %s://%s%s: credentials in a URI are not accepted; use the environment or a credentials file", u.Scheme, u.Host, u.Path)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return URI{}, fmt.Errorf("URI %q: query and fragment are not supported (escape '?' as %%3F and '#' as %%23)", s)
	}
	p := u.Path
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") {
		return URI{}, fmt.Errorf("URI %q: path must be absolute", s)
	}
	if err := checkClean(p); err != nil {
		return URI{}, fmt.Errorf("URI %q: %v", s, err)
	}
	out := URI{Path: p}
	switch strings.ToLower(u.Scheme) {
	case "oss":
		out.Scheme = SchemeOSS
		host := u.Host
		if host == "" {
			return URI{}, fmt.Errorf("URI %q: missing bucket (want oss://bucket/prefix/)", s)
		}
		if i := strings.IndexByte(host, '.'); i >= 0 {
			out.Bucket, out.Endpoint = host[:i], host[i+1:]
			if out.Endpoint == "" {
				return URI{}, fmt.Errorf("URI %q: empty endpoint after bucket", s)
			}
		} else {
			out.Bucket = host
		}
		if !validBucket(out.Bucket) {
			return URI{}, fmt.Errorf("URI %q: invalid bucket name %q (3-63 characters of a-z, 0-9 and '-', not starting or ending with '-')", s, out.Bucket)
		}
	case "hdfs":
		out.Scheme = SchemeHDFS
		if u.Host == "" {
			return URI{}, fmt.Errorf("URI %q: missing namenode (want hdfs://namenode:port/path/)", s)
		}
		for _, h := range strings.Split(u.Host, ",") {
			if h == "" {
				return URI{}, fmt.Errorf("URI %q: empty namenode address in list", s)
			}
			out.Hosts = append(out.Hosts, h)
		}
	case "nas", "file":
		out.Scheme = SchemeNAS
		if u.Host != "" && u.Host != "localhost" {
			return URI{}, fmt.Errorf("URI %q: a %s URI takes no host (want %s:///abs/path/)", s, u.Scheme, u.Scheme)
		}
	case "":
		return URI{}, fmt.Errorf("URI %q has no scheme; want oss://, hdfs://, nas:// or file://", s)
	default:
		return URI{}, fmt.Errorf("URI %q: unknown scheme %q; want oss, hdfs, nas or file", s, u.Scheme)
	}
	return out, nil
}

// checkClean refuses "." and ".." segments and empty segments, which would
// make a URI name something other than what it reads as.
func checkClean(p string) error {
	trimmed := strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
	if trimmed == "" {
		return nil
	}
	for _, seg := range strings.Split(trimmed, "/") {
		switch seg {
		case "":
			return fmt.Errorf("empty path segment (\"//\")")
		case ".", "..":
			return fmt.Errorf("path segment %q not allowed", seg)
		}
	}
	return nil
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
	case SchemeHDFS:
		host = strings.Join(u.Hosts, ",")
	}
	return u.Scheme + "://" + host + (&url.URL{Path: u.Path}).EscapedPath()
}
