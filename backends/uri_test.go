package backends

import (
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
	}
}

func TestParseURIErrors(t *testing.T) {
	cases := map[string]string{
		"":                         "empty",
		"s3://bucket/x/":           "unknown scheme",
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
