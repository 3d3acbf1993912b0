package backends

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	cases := []struct {
		in       string
		scheme   string
		bucket   string
		endpoint string
		hosts    string
		path     string
		dir      bool
		base     string
	}{
		{"oss://my-bucket/data/train/", SchemeOSS, "my-bucket", "", "", "/data/train/", true, ""},
		{"oss://my-bucket.oss-cn-hangzhou.aliyuncs.com/data/a.csv", SchemeOSS, "my-bucket", "oss-cn-hangzhou.aliyuncs.com", "", "/data/a.csv", false, "a.csv"},
		{"oss://bkt", SchemeOSS, "bkt", "", "", "/", true, ""},
		{"hdfs://nn:8020/user/x/", SchemeHDFS, "", "", "nn:8020", "/user/x/", true, ""},
		{"hdfs://nn1:8020,nn2:8020/f", SchemeHDFS, "", "", "nn1:8020,nn2:8020", "/f", false, "f"},
		{"nas:///mnt/data/", SchemeNAS, "", "", "", "/mnt/data/", true, ""},
		{"file:///mnt/data/x.bin", SchemeNAS, "", "", "", "/mnt/data/x.bin", false, "x.bin"},
		{"nas:///mnt/with%20space/", SchemeNAS, "", "", "", "/mnt/with space/", true, ""},
		{"oss://bkt.127.0.0.1:9000/x/", SchemeOSS, "bkt", "127.0.0.1:9000", "", "/x/", true, ""},
		{"oss://bkt.[::1]:9000/x/", SchemeOSS, "bkt", "[::1]:9000", "", "/x/", true, ""},
		{"OSS://bkt/x/", SchemeOSS, "bkt", "", "", "/x/", true, ""},
		{"hdfs://openpai/x/", SchemeHDFS, "", "", "openpai", "/x/", true, ""},
		{"hdfs://[::1]:8020/x/", SchemeHDFS, "", "", "[::1]:8020", "/x/", true, ""},
		{"hdfs://nn.example.com:8020", SchemeHDFS, "", "", "nn.example.com:8020", "/", true, ""},
		{"nas:///a%25b/c%3Fd%23e/", SchemeNAS, "", "", "", "/a%b/c?d#e/", true, ""},
		{"file:///x", SchemeNAS, "", "", "", "/x", false, "x"},
	}
	for _, c := range cases {
		u, err := ParseURI(c.in)
		if err != nil {
			t.Errorf("ParseURI(%q): %v", c.in, err)
			continue
		}
		if u.Scheme != c.scheme || u.Bucket != c.bucket || u.Endpoint != c.endpoint ||
			strings.Join(u.Hosts, ",") != c.hosts || u.Path != c.path || u.IsDir() != c.dir || u.Base() != c.base {
			t.Errorf("ParseURI(%q) = %+v (dir %v base %q)", c.in, u, u.IsDir(), u.Base())
		}
		// The canonical form parses back to the same URI.
		if again, err := ParseURI(u.String()); err != nil || again.String() != u.String() || again.Path != u.Path {
			t.Errorf("ParseURI(%q.String() = %q) = %+v, %v", c.in, u.String(), again, err)
		}
	}
}

func TestParseURIErrors(t *testing.T) {
	cases := map[string]string{
		"":                         "empty",
		"gs://bucket/x/":           "unknown scheme",
		"/plain/path":              "no scheme",
		"oss:///x/":                "missing bucket",
		"oss://AK:SK@bucket/x/":    "credentials",
		"oss://B/x/":               "invalid bucket",
		"hdfs:///x/":               "missing namenode",
		"nas://host/x/":            "takes no host",
		"nas:///a/../b/":           "not allowed",
		"nas:///a//b/":             "empty path segment",
		"oss://bucket/x?versionId": "query",
	}
	for in, want := range cases {
		_, err := ParseURI(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURI(%q) error = %v, want it to mention %q", in, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "SK") || strings.Contains(err.Error(), "AK")) {
			t.Errorf("ParseURI(%q) leaks the secret: %v", in, err)
		}
	}
}

// TestParseS3URI: s3:// URIs take a bucket (dots allowed, as S3 allows
// them), a prefix, and the endpoint, region and path_style parameters,
// which survive the canonical form; nothing else in the query passes, and a
// credential in it is refused without being repeated.
func TestParseS3URI(t *testing.T) {
	cases := []struct {
		in, bucket, endpoint, region, pathStyle, path, canon string
	}{
		{"s3://my.bucket/data/", "my.bucket", "", "", "", "/data/", "s3://my.bucket/data/"},
		{"s3://bkt", "bkt", "", "", "", "/", "s3://bkt/"},
		{"s3://cache--usw2-az1--x-s3/mlfsd/", "cache--usw2-az1--x-s3", "", "", "", "/mlfsd/", "s3://cache--usw2-az1--x-s3/mlfsd/"},
		{"s3://bkt/a.bin?endpoint=http://minio.svc:9000&path_style=true", "bkt", "http://minio.svc:9000", "", "true", "/a.bin",
			"s3://bkt/a.bin?endpoint=http%3A%2F%2Fminio.svc%3A9000&path_style=true"},
		{"s3://bkt/p/?region=eu-west-1&endpoint=10.0.0.5:8333", "bkt", "10.0.0.5:8333", "eu-west-1", "", "/p/",
			"s3://bkt/p/?endpoint=10.0.0.5%3A8333&region=eu-west-1"},
		{"s3://bkt/with%20space/?path_style=false", "bkt", "", "", "false", "/with space/", "s3://bkt/with%20space/?path_style=false"},
		{"s3://bkt/q%3Fx/", "bkt", "", "", "", "/q?x/", "s3://bkt/q%3Fx/"},
		{"s3://bkt/p/?profile=minio&endpoint=m:9000", "bkt", "m:9000", "", "", "/p/", "s3://bkt/p/?endpoint=m%3A9000&profile=minio"},
	}
	for _, c := range cases {
		u, err := ParseURI(c.in)
		if err != nil {
			t.Errorf("ParseURI(%q): %v", c.in, err)
			continue
		}
		if u.Scheme != SchemeS3 || u.Bucket != c.bucket || u.Endpoint != c.endpoint || u.Region != c.region || u.PathStyle != c.pathStyle || u.Path != c.path {
			t.Errorf("ParseURI(%q) = %+v", c.in, u)
		}
		if got := u.String(); got != c.canon {
			t.Errorf("ParseURI(%q).String() = %q, want %q", c.in, got, c.canon)
		}
		if again, err := ParseURI(u.String()); err != nil || !reflect.DeepEqual(again, u) {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v", u.String(), again, err, u)
		}
		if d := u.Dir(); d.Endpoint != u.Endpoint || d.Region != u.Region || d.PathStyle != u.PathStyle || d.Profile != u.Profile {
			t.Errorf("%q.Dir() lost the parameters: %+v", c.in, d)
		}
	}
	bad := map[string]string{
		"s3:///x/":                                   "missing bucket",
		"s3://Bkt/x/":                                "invalid bucket",
		"s3://a..b/x/":                               "invalid bucket",
		"s3://bkt/x/?versionId=3":                    "unknown query parameter",
		"s3://bkt/x/?endpoint=ftp://h:1":             "http or https",
		"s3://bkt/x/?endpoint=h:1/path":              "invalid endpoint",
		"s3://bkt/x/?path_style=yes":                 "true or false",
		"s3://bkt/x/?region=a&region=b":              "2 times",
		"s3://bkt/x/?region=US_EAST":                 "invalid region",
		"s3://bkt/x/?profile=a%20b":                  "invalid profile",
		"s3://bkt/x/#frag":                           "fragment",
		"s3://bkt/x/?region=r#frag":                  "fragment",
		"s3://AK:SK@bkt/x/":                          "credentials",
		"s3://bkt/x/?aws_secret_access_key=SKSECRET": "credentials",
		"s3://bkt/x/?access_key=AKSECRET":            "credentials",
	}
	for in, want := range bad {
		_, err := ParseURI(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURI(%q) error = %v, want it to mention %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") || err != nil && strings.Contains(err.Error(), "SK@") {
			t.Errorf("ParseURI(%q) leaks the secret: %v", in, err)
		}
	}
}

// TestParseURIRefusesUndocumentedForms: only the documented forms pass. Each
// bad URI here once parsed, most of them as the host's root directory.
func TestParseURIRefusesUndocumentedForms(t *testing.T) {
	cases := []struct{ in, want string }{
		// Opaque and relative forms: no "//" after the scheme.
		{"nas:out/", "want nas:///abs/path/"},
		{"file:etc/", "want file:///abs/path/"},
		{"nas:/etc/", "want nas:///abs/path/"},
		{"file:/", "want file:///abs/path/"},
		{"oss:bucket/x/", "want oss://bucket/prefix/"},
		{"hdfs:nn:8020/x/", "want hdfs://namenode:port/path/"},
		{"nas:", "want nas:///abs/path/"},
		{"nas://", "want nas:///abs/path/"},
		{"nas:///", "host's root directory"},
		{"file:///", "host's root directory"},
		{"nas://localhost/etc/", "takes no host"},
		{"nas://./etc/", "takes no host"},
		{"nas:////etc/", "empty path segment"},
		// Empty hosts and ports.
		{"hdfs://:8020/", "empty host"},
		{"hdfs://nn:/x/", "empty port"},
		{"hdfs://nn:0/x/", "port"},
		{"hdfs://nn:99999/x/", "port"},
		{"hdfs://nn:80x/x/", "port"},
		{"hdfs://nn1:8020,/x/", "empty namenode address"},
		{"hdfs://nn1:8020,nn2/x/", "missing port"},
		{"hdfs://nn_1:8020/x/", "invalid host"},
		{"oss://:9000/x/", "missing bucket"},
		{"oss://bucket:9000/x/", "invalid bucket"},
		{"oss://bucket./x/", "empty endpoint"},
		{"oss://bucket.ep:/x/", "empty port"},
		{"oss://bucket.e_p/x/", "invalid endpoint"},
		// Relative paths, dot segments (also escaped), empty segments.
		{"nas://../etc/", "takes no host"},
		{"nas:///data/../../etc/", "not allowed"},
		{"nas:///data/%2E%2E/etc/", "not allowed"},
		{"nas:///data%2F..%2Fetc/", "not allowed"},
		{"oss://bucket/a/./b/", "not allowed"},
		{"hdfs://nn:8020/a/../", "not allowed"},
		// Query and fragment.
		{"nas:///data/?x=1", "query"},
		{"nas:///data/#frag", "fragment"},
		{"oss://bucket/x/?", "query"},
		{"oss://bucket/x/#", "fragment"},
		// Control characters, raw or escaped.
		{"nas:///data/a%0Ab/", "control character"},
		{"nas:///data/a%00b/", "control character"},
		{"oss://bucket/a%7Fb/", "control character"},
		{"nas:///data/a\nb/", "control character"},
		{"nas:///data/a\tb/", "control character"},
		// Userinfo, with or without a secret.
		{"oss://AKID:SECRETKEY@bucket/x/", "credentials"},
		{"hdfs://alice:SECRETKEY@nn:8020/x/", "credentials"},
		{"nas://SECRETKEY@/data/", "credentials"},
		{"oss://AKID:SECRETKEY@bu cket/x/", "credentials"},
	}
	for _, c := range cases {
		in := c.in
		u, err := ParseURI(in)
		if err == nil {
			t.Errorf("ParseURI(%q) = %+v, want an error mentioning %q", in, u, c.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("ParseURI(%q) error = %q, want it to mention %q", in, msg, c.want)
		}
		for _, r := range msg {
			if r < 0x20 || r == 0x7f {
				t.Errorf("ParseURI(%q) error %q holds control character %U", in, msg, r)
			}
		}
		if strings.Contains(msg, "SECRETKEY") {
			t.Errorf("ParseURI(%q) error leaks the secret: %q", in, msg)
		}
	}
}

// TestParseURIEscapesErrors: text from the URI appears quoted in errors, so a
// newline in it cannot forge a log line.
func TestParseURIEscapesErrors(t *testing.T) {
	for _, in := range []string{
		"s3://x%0Ay/",
		"nas:///a%0Ab/",
		"nas://h%0Ax/p/",
		"oss://B%0AX/p/",
		"oss://b%0A:x@bucket/p/",
		"hdfs://nn%0A:8020/p/",
		"oss://bucket/p/?a=%0A",
		"nas:///a\nb/",
	} {
		_, err := ParseURI(in)
		if err == nil {
			t.Errorf("ParseURI(%q) succeeded", in)
			continue
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("ParseURI(%q) error holds a raw line break: %q", in, err.Error())
		}
	}
}

func TestURIDirJoinString(t *testing.T) {
	u, _ := ParseURI("oss://bkt.ep/a/b/c.csv")
	if got := u.Dir().String(); got != "oss://bkt.ep/a/b/" {
		t.Errorf("Dir = %s", got)
	}
	o, _ := ParseURI("hdfs://nn:9000/out/")
	if got := o.Join("model").String(); got != "hdfs://nn:9000/out/model/" {
		t.Errorf("Join = %s", got)
	}
	f, _ := ParseURI("file:///x/y/")
	if f.String() != "nas:///x/y/" {
		t.Errorf("String = %s", f.String())
	}
}
