package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// TestCredentialsFile: the AWS shared credentials format (the profile
// $AWS_PROFILE names, else [default]) and env-file lines are read; a file
// others may read is refused; errors never repeat the secret.
func TestCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ini := write("credentials", `# comment
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = SKDEFAULT

[profile cache]
aws_access_key_id=AKCACHE
aws_secret_access_key="SKCACHE"
aws_session_token = TOKEN
`, 0o600)
	for _, c := range []struct{ profile, id, secret, token string }{
		{"", "AKDEFAULT", "SKDEFAULT", ""},
		{"cache", "AKCACHE", "SKCACHE", "TOKEN"},
	} {
		got, err := readCredentialsFile(ini, c.profile, false)
		if err != nil || got != (credentials{c.id, c.secret, c.token}) {
			t.Errorf("profile %q: %v, %v", c.profile, got.id, err)
		}
	}
	if _, err := readCredentialsFile(ini, "nosuch", true); err == nil || !strings.Contains(err.Error(), "[nosuch]") {
		t.Errorf("a missing profile a URI names: %v", err)
	}
	if got, err := readCredentialsFile(ini, "nosuch", false); err == nil {
		t.Errorf("a missing $AWS_PROFILE fell back to %q", got.id)
	}
	// A URI's profile picks its section of the credentials file, or of
	// $AWS_SHARED_CREDENTIALS_FILE.
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
	if _, err := loadCredentials("", "cache"); err == nil || !strings.Contains(err.Error(), "--s3-credentials-file") {
		t.Errorf("a profile without a credentials file: %v", err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", ini)
	if got, err := loadCredentials("", "cache"); err != nil || got.id != "AKCACHE" {
		t.Errorf("profile from $AWS_SHARED_CREDENTIALS_FILE: %q, %v", got.id, err)
	}
	env := write("env", "export AWS_ACCESS_KEY_ID=AKENV\nAWS_SECRET_ACCESS_KEY='SKENV'\n", 0o600)
	if got, err := readCredentialsFile(env, "", false); err != nil || got.id != "AKENV" || got.secret != "SKENV" {
		t.Errorf("env file: %v, %v", got.id, err)
	}
	open := write("open", "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SKOPEN\n", 0o644)
	if _, err := readCredentialsFile(open, "", false); err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "SKOPEN") {
		t.Errorf("a world-readable file: %v", err)
	}
	half := write("half", "[default]\naws_access_key_id = AK\n", 0o600)
	if _, err := readCredentialsFile(half, "", false); err == nil {
		t.Error("a file without a secret was accepted")
	}
	if s := fmt.Sprintf("%v %+v %#v", credentials{"a", "SECRET", "TOK"}, credentials{"a", "SECRET", "TOK"}, credentials{"a", "SECRET", "TOK"}); strings.Contains(s, "SECRET") || strings.Contains(s, "TOK") {
		t.Errorf("credentials format their secret: %s", s)
	}
}

// TestCredentialsEnv: without a file, the AWS_* environment is read, and
// its absence is an error that says what to set.
func TestCredentialsEnv(t *testing.T) {
	setCreds(t)
	t.Setenv("AWS_SESSION_TOKEN", "TOK")
	if c, err := loadCredentials("", ""); err != nil || c.id != ossemutest.AccessKeyID || c.token != "TOK" {
		t.Errorf("from the environment: %v, %v", c.id, err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := loadCredentials("", ""); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("without a secret: %v", err)
	}
}

// TestResolveEndpoint: URI over option over environment; path style by
// default for an endpoint of our own, virtual-hosted for AWS; http for an
// IP or localhost without a scheme, https otherwise.
func TestResolveEndpoint(t *testing.T) {
	setCreds(t)
	cases := []struct {
		uriEP, optEP, env, uriPS, optPS string
		url, host                       string
		pathStyle                       bool
	}{
		{"", "", "", "", "", "", "", false},
		{"10.0.0.5:8333", "", "", "", "", "http://10.0.0.5:8333", "10.0.0.5:8333", true},
		{"", "minio.svc:9000", "", "", "", "https://minio.svc:9000", "minio.svc:9000", true},
		{"", "", "http://Env.Example:80", "", "", "http://Env.Example:80", "env.example:80", true},
		{"http://a:1", "http://b:2", "http://c:3", "", "", "http://a:1", "a:1", true},
		{"localhost:9000", "", "", "false", "true", "http://localhost:9000", "localhost:9000", false},
		{"", "", "", "", "true", "", "", true},
	}
	for _, c := range cases {
		t.Setenv("AWS_ENDPOINT_URL_S3", c.env)
		e, err := resolveEndpoint(c.uriEP, c.optEP, "", "", c.uriPS, c.optPS)
		if err != nil || e.url != c.url || e.host != c.host || e.pathStyle != c.pathStyle {
			t.Errorf("%+v: %+v, %v", c, e, err)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_REGION", "ap-east-1")
	if e, _ := resolveEndpoint("", "", "", "", "", ""); e.region != "ap-east-1" {
		t.Errorf("region from AWS_REGION: %q", e.region)
	}
	if e, _ := resolveEndpoint("", "", "eu-west-1", "us-west-2", "", ""); e.region != "eu-west-1" {
		t.Errorf("region from the URI: %q", e.region)
	}
	for _, bad := range []string{"ftp://x:1", "http://x:1/path", "http://"} {
		if _, err := resolveEndpoint(bad, "", "", "", "", ""); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
	if _, err := resolveEndpoint("", "", "", "", "", "maybe"); err == nil {
		t.Error("path style \"maybe\" accepted")
	}
}

// TestOpenErrors: a missing bucket and a wrong key fail New with the
// sentinel and a message naming what to fix; the secret is never in it.
func TestOpenErrors(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	u, _ := backends.ParseURI("s3://nosuchbucket/x/?endpoint=" + e.endpoint)
	_, err := New(t.Context(), u, Options{Retry: fastRetry}, nil)
	if !errors.Is(err, backends.ErrNotExist) || !strings.Contains(err.Error(), "nosuchbucket") {
		t.Errorf("missing bucket: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "WRONGSECRET")
	u, _ = backends.ParseURI("s3://" + testBucket + "/x/?endpoint=" + e.endpoint)
	_, err = New(t.Context(), u, Options{Retry: fastRetry}, nil)
	if !errors.Is(err, backends.ErrPermission) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") || strings.Contains(err.Error(), "WRONGSECRET") {
		t.Errorf("wrong secret: %v", err)
	}
}

// TestConnectTimeout: an endpoint that accepts connections and never
// answers fails New within the connect timeout, by name, as transient.
func TestConnectTimeout(t *testing.T) {
	setCreds(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	u, _ := backends.ParseURI("s3://" + testBucket + "/x/?endpoint=" + l.Addr().String())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = New(ctx, u, Options{Retry: fastRetry, ConnectTimeout: 300 * time.Millisecond}, nil)
	if !errors.Is(err, backends.ErrTransient) || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("silent endpoint: %v", err)
	}
}

// TestRegionErrors: a request signed for the wrong region, or a bucket of
// another region, says to set the region.
func TestRegionErrors(t *testing.T) {
	b := &Backend{bucket: "bkt", ep: endpoint{url: "http://minio:9000", region: "us-east-1"}}
	for _, code := range []string{"AuthorizationHeaderMalformed", "PermanentRedirect"} {
		err := b.wrapErr("stat", "k", &smithy.GenericAPIError{Code: code, Message: "wrong region"})
		if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), "region=") || !strings.Contains(err.Error(), "us-east-1") {
			t.Errorf("%s: %v", code, err)
		}
	}
}
