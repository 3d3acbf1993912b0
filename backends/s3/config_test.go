package s3

import (
	"context"
	"errors"
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

// isolateChain clears what in the environment could steer the AWS
// default chain (keys, profiles, the files in $HOME, instance metadata),
// so a test sees only the sources it sets.
func isolateChain(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ENDPOINT_URL_STS", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestCredentialsFile: --s3-credentials-file is read by the SDK's chain,
// profile [default] or the one a URI names; a missing profile is an error
// naming it; a file others may read is refused; errors never repeat the
// secret.
func TestCredentialsFile(t *testing.T) {
	isolateChain(t)
	e := startEmu(t, ossemu.Options{})
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

[emu]
aws_access_key_id=`+ossemutest.AccessKeyID+`
aws_secret_access_key=`+ossemutest.AccessKeySecret+`
`, 0o600)
	ctx := t.Context()
	open := func(query string, opt Options) (backends.Backend, error) {
		u, err := backends.ParseURI("s3://" + testBucket + "/data/?endpoint=" + e.endpoint + query)
		if err != nil {
			t.Fatal(err)
		}
		opt.Retry = fastRetry
		return New(ctx, u, opt, nil)
	}
	b, err := open("&profile=emu", Options{CredentialsFile: ini})
	if err != nil {
		t.Fatalf("profile emu: %v", err)
	}
	b.Close()
	if _, err := open("", Options{CredentialsFile: ini}); err == nil || !strings.Contains(err.Error(), "credentials file "+ini) || strings.Contains(err.Error(), "SKDEFAULT") {
		t.Errorf("[default] holds a key the store refuses: %v", err)
	}
	if _, err := open("&profile=nosuch", Options{CredentialsFile: ini}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a missing profile a URI names: %v", err)
	}
	world := write("open", "[default]\naws_access_key_id = AK\naws_secret_access_key = SKOPEN\n", 0o644)
	if _, err := open("", Options{CredentialsFile: world}); err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "SKOPEN") {
		t.Errorf("a world-readable file: %v", err)
	}
	half := write("half", "[default]\naws_access_key_id = AK\n", 0o600)
	if _, err := open("", Options{CredentialsFile: half}); err == nil {
		t.Error("a file without a secret was accepted")
	}
}

// TestCredentialsEnv: without a file, the AWS_* environment is read, and
// the absence of every source is an error that names them.
func TestCredentialsEnv(t *testing.T) {
	isolateChain(t)
	t.Setenv("AWS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", ossemutest.AccessKeySecret)
	t.Setenv("AWS_SESSION_TOKEN", "TOK")
	p, src, err := newCredentials(t.Context(), Options{}, "us-east-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := p.Retrieve(t.Context()); err != nil || c.AccessKeyID != ossemutest.AccessKeyID || c.SessionToken != "TOK" || c.Source != "EnvConfigCredentials" {
		t.Errorf("from the environment (%s): %v from %s, %v", src, c.AccessKeyID, c.Source, err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	p, src, err = newCredentials(t.Context(), Options{}, "us-east-1", "")
	if err == nil {
		_, err = checkCredentials(t.Context(), p, src)
	}
	if err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") || !strings.Contains(err.Error(), "web identity") {
		t.Errorf("without any source: %v", err)
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
