package s3

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// chainEnv is an emulator with STS and metadata endpoints for the AWS
// chain tests.
type chainEnv struct {
	*emu
	metadata string
}

func startChainEnv(t *testing.T) chainEnv {
	t.Helper()
	e := startEmu(t, ossemu.Options{STSDuration: time.Hour, STSRoles: []string{"arn:aws:iam::123456789012:role/reader"}})
	md := ossemutest.StartMetadata(t, e.srv, ossemu.MetadataOptions{RoleName: "node-role", RequireToken: true,
		ContainerAuthToken: "container-auth-token", SSOAccessToken: "sso-access-token"})
	return chainEnv{emu: e, metadata: md}
}

// openChainURI opens the emulator's bucket with keys from the default
// chain, or returns New's error.
func (c chainEnv) open(t *testing.T, query string, opt Options) (*Backend, error) {
	t.Helper()
	u, err := backends.ParseURI("s3://" + testBucket + "/chain/?endpoint=" + c.endpoint + query)
	if err != nil {
		t.Fatal(err)
	}
	opt.Retry = fastRetry
	b, err := New(t.Context(), u, opt, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { b.Close() })
	return b.(*Backend), nil
}

// TestChainSources: each source of the AWS SDK's default chain, set alone,
// gives keys the emulator issued (web identity through its STS, container
// credentials, IMDSv2, SSO) or accepts (a profile of the shared files),
// with which the backend writes and reads an object; the backend names the
// source the chain used.
func TestChainSources(t *testing.T) {
	env := startChainEnv(t)
	for _, c := range []struct {
		name, query, source string
		set                 func(t *testing.T)
	}{
		{"web identity (IRSA)", "", "WebIdentityCredentials", func(t *testing.T) {
			t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.amazonaws.com", time.Now().Add(time.Hour)), 0o600))
			t.Setenv("AWS_ENDPOINT_URL_STS", env.endpoint)
		}},
		{"shared config profile with a web identity", "&profile=irsa", "WebIdentityCredentials", func(t *testing.T) {
			tok := ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.amazonaws.com", time.Now().Add(time.Hour)), 0o600)
			t.Setenv("AWS_CONFIG_FILE", ossemutest.WriteFile(t, "config", "[profile irsa]\nrole_arn = arn:aws:iam::123456789012:role/reader\nweb_identity_token_file = "+tok+"\n", 0o600))
			t.Setenv("AWS_ENDPOINT_URL_STS", env.endpoint)
		}},
		{"shared credentials file, AWS_PROFILE", "", "SharedConfigCredentials", func(t *testing.T) {
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", ossemutest.WriteFile(t, "credentials", fmt.Sprintf("[default]\naws_access_key_id = AKWRONG\naws_secret_access_key = wrong\n\n[emu]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
				ossemutest.AccessKeyID, ossemutest.AccessKeySecret), 0o600))
			t.Setenv("AWS_PROFILE", "emu")
		}},
		{"container credentials (EKS Pod Identity)", "", "CredentialsEndpoint", func(t *testing.T) {
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", env.metadata+ossemu.AWSContainerCredentialsPath)
			t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", ossemutest.WriteFile(t, "eks-pod-identity-token", "container-auth-token", 0o600))
		}},
		{"EC2 instance metadata (IMDSv2)", "", "EC2RoleProvider", func(t *testing.T) {
			t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", env.metadata)
		}},
		{"SSO", "&profile=sso", "SSOProvider", func(t *testing.T) {
			const start = "https://mlfsd.awsapps.com/start"
			home := t.TempDir()
			t.Setenv("HOME", home)
			sum := sha1.Sum([]byte(start))
			cache := filepath.Join(home, ".aws", "sso", "cache", hex.EncodeToString(sum[:])+".json")
			if err := os.MkdirAll(filepath.Dir(cache), 0o700); err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"accessToken":"sso-access-token","expiresAt":%q,"region":"us-east-1","startUrl":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339), start)
			if err := os.WriteFile(cache, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("AWS_CONFIG_FILE", ossemutest.WriteFile(t, "config", "[profile sso]\nsso_start_url = "+start+"\nsso_region = us-east-1\nsso_account_id = 123456789012\nsso_role_name = reader\n", 0o600))
			t.Setenv("AWS_ENDPOINT_URL_SSO", env.metadata)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolateChain(t)
			t.Setenv("AWS_ENDPOINT_URL_SSO", "")
			c.set(t)
			before := env.srv.Stats()
			b, err := env.open(t, c.query, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.credSource, c.source) {
				t.Errorf("source %q, want %q", b.credSource, c.source)
			}
			backendtest.WriteReadBack(t, b, strings.ReplaceAll(c.name, " ", "-"))
			issued := env.srv.Stats()["sts.issued"] - before["sts.issued"]
			if static := c.source == "SharedConfigCredentials"; static != (issued == 0) {
				t.Errorf("%d keys issued by the emulator", issued)
			}
		})
	}
}

// TestChainErrors: each bad credential fails New with an error naming
// the source and what is wrong, never the secret.
func TestChainErrors(t *testing.T) {
	env := startChainEnv(t)
	const secret = "very-secret-value-0123"
	for _, c := range []struct {
		name, query string
		set         func(t *testing.T)
		want        []string
	}{
		{"expired token file", "", func(t *testing.T) {
			t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.amazonaws.com", time.Now().Add(-time.Minute)), 0o600))
			t.Setenv("AWS_ENDPOINT_URL_STS", env.endpoint)
		}, []string{"AssumeRoleWithWebIdentity", "ExpiredTokenException"}},
		{"missing token file", "", func(t *testing.T) {
			t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader")
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token")
			t.Setenv("AWS_ENDPOINT_URL_STS", env.endpoint)
		}, []string{"/nonexistent/token"}},
		{"wrong role", "", func(t *testing.T) {
			t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/admin")
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.amazonaws.com", time.Now().Add(time.Hour)), 0o600))
			t.Setenv("AWS_ENDPOINT_URL_STS", env.endpoint)
		}, []string{"AccessDenied", "role/admin"}},
		{"unreadable profile", "&profile=emu", func(t *testing.T) {
			t.Setenv("AWS_CONFIG_FILE", t.TempDir()) // a directory: cannot be read as a file
		}, []string{"emu"}},
		{"missing profile", "&profile=nosuch", func(t *testing.T) {}, []string{"nosuch"}},
		{"metadata unreachable", "", func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://"+addr)
		}, []string{"EC2 IMDS", "connection refused"}},
		{"wrong container token", "", func(t *testing.T) {
			t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", env.metadata+ossemu.AWSContainerCredentialsPath)
			t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", secret)
		}, []string{"container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI " + env.metadata, "AccessDenied"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolateChain(t)
			c.set(t)
			b, err := env.open(t, c.query, Options{})
			if err == nil {
				b.Close()
				t.Fatal("opened")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q: %v", w, msg)
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error holds the secret: %v", msg)
			}
		})
	}
}
