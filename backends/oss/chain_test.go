package oss

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// chainEmu is the emulator the credential chain tests reach through the
// SDKs' fixed endpoints (https://sts.aliyuncs.com, http://100.100.100.200):
// TestMain makes its metadata listener the process's proxy and its
// authority the trusted one (ossemutest.RunAsProxy). Nothing else in the
// package is proxied: the backend's own transport uses no proxy, and
// loopback addresses never are.
var chainEmu ossemutest.Process

func TestMain(m *testing.M) {
	os.Exit(ossemutest.RunAsProxy(m, testBucket, ossemu.Options{STSDuration: time.Hour,
		STSRoles: []string{"acs:ram::1:role/reader", "arn:aws:iam::1:role/reader"}},
		ossemu.MetadataOptions{RoleName: "node-role", RequireToken: true}, &chainEmu))
}

// isolateChain clears every variable and file the Alibaba Cloud default
// chain reads, and turns the ECS source off unless ecs; the test then
// sets only the source it means.
func isolateChain(t *testing.T, ecs bool) {
	t.Helper()
	for _, k := range []string{"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN", "OSS_ENDPOINT", "OSS_REGION",
		"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN",
		"ALIBABA_CLOUD_ROLE_ARN", "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE", "ALIBABA_CLOUD_OIDC_TOKEN",
		"ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_CREDENTIALS_URI", "ALIBABA_CLOUD_ECS_METADATA", "ALIBABA_CLOUD_STS_REGION",
		"ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED"} {
		t.Setenv(k, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", filepath.Join(home, "no-credentials"))
	t.Setenv("ALIBABA_CLOUD_CONFIG_FILE", filepath.Join(home, "no-config.json"))
	t.Setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", fmt.Sprint(!ecs))
	t.Setenv("ALIBABA_CLOUD_IMDSV1_DISABLED", "true") // the hardened mode only
}

// openChain opens the chain emulator's bucket with keys from the default
// chain and returns the backend, or New's error.
func openChain(t *testing.T) (*Backend, error) {
	t.Helper()
	u, err := backends.ParseURI("oss://" + testBucket + "/chain/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(t.Context(), u, Options{Endpoint: chainEmu.Endpoint, Retry: fastRetry}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { b.Close() })
	return b.(*Backend), nil
}

// TestChainSources: each source of the Alibaba Cloud default chain, set
// alone, gives keys the emulator issued (STS, instance metadata, a
// credentials URI) or accepts, with which the backend writes and reads an
// object over V4 signatures; the backend names the source it used.
func TestChainSources(t *testing.T) {
	srv := chainEmu.Server
	for _, c := range []struct {
		name, source string
		ecs          bool
		set          func(t *testing.T)
	}{
		{"environment STS key", "environment (ALIBABA_CLOUD_ACCESS_KEY_ID)", false, func(t *testing.T) {
			k := srv.IssueKey(0)
			t.Setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", k.AccessKeyID)
			t.Setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", k.AccessKeySecret)
			t.Setenv("ALIBABA_CLOUD_SECURITY_TOKEN", k.SecurityToken)
		}},
		{"OIDC role (RRSA)", "OIDC role acs:ram::1:role/reader", false, func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/reader")
			t.Setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "acs:ram::1:oidc-provider/ack-rrsa")
			t.Setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.aliyuncs.com", time.Now().Add(time.Hour)), 0o600))
		}},
		{"credentials file, default profile", "credentials file", false, func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", ossemutest.WriteFile(t, "credentials", fmt.Sprintf(
				"[default]\nenable = true\ntype = access_key\naccess_key_id = %s\naccess_key_secret = %s\n",
				ossemutest.AccessKeyID, ossemutest.AccessKeySecret), 0o600))
		}},
		{"credentials file, RAM role profile (AssumeRole)", "profile ops", false, func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", ossemutest.WriteFile(t, "credentials", fmt.Sprintf(
				"[default]\ntype = access_key\naccess_key_id = nobody\naccess_key_secret = nothing\n\n"+
					"[ops]\ntype = ram_role_arn\naccess_key_id = %s\naccess_key_secret = %s\nrole_arn = acs:ram::1:role/reader\nrole_session_name = mlfsd\n",
				ossemutest.AccessKeyID, ossemutest.AccessKeySecret), 0o600))
			t.Setenv("ALIBABA_CLOUD_PROFILE", "ops")
		}},
		{"ECS RAM role, hardened", "ECS RAM role", true, func(t *testing.T) {}},
		{"credentials URI", "credentials URI " + chainEmu.Metadata + ossemu.AlibabaCredentialsURIPath, false, func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_URI", chainEmu.Metadata+ossemu.AlibabaCredentialsURIPath)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolateChain(t, c.ecs)
			c.set(t)
			before := srv.Stats()
			b, err := openChain(t)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.cred.source, c.source) {
				t.Errorf("source %q, want it to name %q", b.cred.source, c.source)
			}
			key := strings.ReplaceAll(c.name, " ", "-")
			backendtest.WriteReadBack(t, b, key)
			after := srv.Stats()
			switch c.name {
			case "credentials file, default profile":
				if after["sts.issued"] != before["sts.issued"] {
					t.Error("a static key from the profile went through STS")
				}
			default:
				if after["sts.issued"] == before["sts.issued"] && c.name != "environment STS key" {
					t.Error("no key was issued: the source did not reach the emulator")
				}
			}
		})
	}
}

// TestChainErrors: each bad credential fails New with an error that names
// its source and what is wrong, and never holds the secret.
func TestChainErrors(t *testing.T) {
	const secret = "very-secret-value-0123"
	for _, c := range []struct {
		name string
		set  func(t *testing.T)
		want []string
	}{
		{"expired token file", func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/reader")
			t.Setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "acs:ram::1:oidc-provider/ack-rrsa")
			t.Setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.aliyuncs.com", time.Now().Add(-time.Minute)), 0o600))
		}, []string{"OIDC role acs:ram::1:role/reader", "AuthenticationFail.OIDCToken.Expired"}},
		{"missing token file", func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/reader")
			t.Setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "acs:ram::1:oidc-provider/ack-rrsa")
			t.Setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", "/nonexistent/token")
		}, []string{"OIDC role", "/nonexistent/token"}},
		{"wrong role", func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/admin")
			t.Setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "acs:ram::1:oidc-provider/ack-rrsa")
			t.Setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", ossemutest.WriteFile(t, "token", ossemutest.WebToken("sts.aliyuncs.com", time.Now().Add(time.Hour)), 0o600))
		}, []string{"OIDC role acs:ram::1:role/admin", "EntityNotExist.Role"}},
		{"unreadable profile", func(t *testing.T) {
			p := ossemutest.WriteFile(t, "credentials", "[default]\ntype = access_key\naccess_key_id = AK\naccess_key_secret = "+secret+"\n", 0o600)
			if err := os.Chmod(filepath.Dir(p), 0o000); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(filepath.Dir(p), 0o700) })
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", p)
			if os.Geteuid() == 0 {
				// root reads through any mode: a directory in its place
				// is what cannot be read then.
				t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", t.TempDir())
			}
		}, []string{"credentials file", "Can not open file"}},
		{"wrong key in profile", func(t *testing.T) {
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_FILE", ossemutest.WriteFile(t, "credentials", "[default]\ntype = access_key\naccess_key_id = AKWRONG\naccess_key_secret = "+secret+"\n", 0o600))
		}, []string{"InvalidAccessKeyId", "credentials file"}},
		{"metadata unreachable", func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close() // nothing listens there now
			t.Setenv("ALIBABA_CLOUD_CREDENTIALS_URI", "http://"+addr+"/credentials?token="+secret)
		}, []string{"credentials URI http://", "connection refused"}},
		{"nothing configured", func(t *testing.T) {}, []string{"no OSS credentials", "OSS_ACCESS_KEY_ID", "ALIBABA_CLOUD_ROLE_ARN", "credentials file", "ECS RAM role"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolateChain(t, false)
			c.set(t)
			b, err := openChain(t)
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

// TestRegionAndSignature: the region comes from the endpoint, else the
// option, else OSS_REGION; an endpoint without one is an error saying what
// to pass; v1 is taken only when asked.
func TestRegionAndSignature(t *testing.T) {
	t.Setenv("OSS_REGION", "")
	for _, c := range []struct {
		host, opt, version string
		local              bool
		wantV, wantR, err  string
	}{
		{"oss-cn-hangzhou.aliyuncs.com", "", "", false, "v4", "cn-hangzhou", ""},
		{"oss-cn-beijing-internal.aliyuncs.com", "us-west-1", "", false, "v4", "cn-beijing", ""},
		{"bkt.oss-ap-southeast-1.aliyuncs.com:443", "", "v4", false, "v4", "ap-southeast-1", ""},
		{"oss-accelerate.aliyuncs.com", "cn-shanghai", "", false, "v4", "cn-shanghai", ""},
		{"oss-accelerate.aliyuncs.com", "", "", false, "", "", "--oss-region"},
		{"gateway.example.com", "", "", false, "", "", "names no region"},
		{"127.0.0.1:9000", "", "", true, "v4", LocalRegion, ""},
		{"gateway.example.com", "", "v1", false, "v1", "", ""},
		{"gateway.example.com", "", "v2", false, "", "", "want v4"},
	} {
		v, r, err := resolveSigning(c.host, c.local, c.opt, c.version)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %q %q: %v, want an error saying %q", c.host, c.opt, c.version, err, c.err)
		case c.err == "" && (err != nil || string(v) != c.wantV || r != c.wantR):
			t.Errorf("%s %q %q: %s %s %v, want %s %s", c.host, c.opt, c.version, v, r, err, c.wantV, c.wantR)
		}
	}
	t.Setenv("OSS_REGION", "eu-central-1")
	if _, r, err := resolveSigning("gateway.example.com", false, "", ""); err != nil || r != "eu-central-1" {
		t.Errorf("OSS_REGION: %s, %v", r, err)
	}
}

// TestSignsV4ByDefault: the backend signs every request OSS4-HMAC-SHA256
// with the endpoint's region unless V1 is asked for, and then signs V1.
func TestSignsV4ByDefault(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	var mu sync.Mutex
	seen := map[string]int{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, rest, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if scheme == "OSS4-HMAC-SHA256" {
			// The credential scope: AK/DATE/REGION/oss/aliyun_v4_request.
			cred := strings.Split(strings.TrimPrefix(strings.Split(rest, ",")[0], "Credential="), "/")
			if len(cred) == 5 {
				scheme += " " + cred[2]
			}
		}
		mu.Lock()
		seen[scheme]++
		mu.Unlock()
		e.srv.ServeHTTP(w, r)
	}))
	defer ts.Close()
	for _, c := range []struct{ version, region, want string }{
		{"", "", "OSS4-HMAC-SHA256 " + LocalRegion},
		{"", "ap-northeast-1", "OSS4-HMAC-SHA256 ap-northeast-1"},
		{"v1", "", "OSS"},
	} {
		mu.Lock()
		clear(seen)
		mu.Unlock()
		b := openURI(t, "oss://"+testBucket+"/sig/", Options{Endpoint: ts.URL, Retry: fastRetry, SignatureVersion: c.version, Region: c.region})
		backendtest.WriteReadBack(t, b, "k")
		b.Close()
		mu.Lock()
		if len(seen) != 1 || seen[c.want] == 0 {
			t.Errorf("version %q region %q: requests signed %v, want all %q", c.version, c.region, seen, c.want)
		}
		mu.Unlock()
	}
}
