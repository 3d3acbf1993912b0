// Package ossemutest runs an OSS emulator for tests in any package.
package ossemutest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// The key pair Start's emulator accepts (unless the options name another
// or ask for anonymous access): clients in tests sign with these.
const (
	AccessKeyID     = ossemu.DefaultAccessKeyID
	AccessKeySecret = ossemu.DefaultAccessKeySecret
)

// Start serves root (DIR/<bucket>/<key>) with opt on a free loopback port
// until the test ends, and returns the server and its endpoint
// ("http://127.0.0.1:PORT"). Requests must be signed with AccessKeyID and
// AccessKeySecret when opt sets no keys. An error from the server fails
// the test.
func Start(t testing.TB, root string, opt ossemu.Options) (*ossemu.Server, string) {
	t.Helper()
	srv, err := ossemu.New(root, opt)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("OSS emulator: %v", err)
		}
	})
	return srv, "http://" + l.Addr().String()
}

// StartBucket serves, as Start does, a fresh temporary root that holds one
// empty bucket, and returns the server, its endpoint and the root (where a
// test may seed objects or check what was stored: <root>/<bucket>/<key>).
func StartBucket(t testing.TB, bucket string, opt ossemu.Options) (srv *ossemu.Server, endpoint, root string) {
	t.Helper()
	root = t.TempDir()
	if err := os.Mkdir(filepath.Join(root, bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, endpoint = Start(t, root, opt)
	return srv, endpoint, root
}

// StartMetadata serves srv's metadata endpoints (instance metadata, a
// credentials URI, container credentials, and the proxy that reaches
// fixed SDK endpoints: see ossemu.Server.ServeMetadata) on a free loopback
// port until the test ends, and returns their base URL
// ("http://127.0.0.1:PORT").
func StartMetadata(t testing.TB, srv *ossemu.Server, opt ossemu.MetadataOptions) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeMetadata(ctx, l, opt) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("OSS emulator metadata: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// Process is an emulator that serves a whole test binary, reachable at the
// addresses the SDKs fix: see RunAsProxy.
type Process struct {
	Server   *ossemu.Server
	Endpoint string // the store and STS: "http://127.0.0.1:PORT"
	Metadata string // metadata, credentials URI, proxy: "http://127.0.0.1:PORT"
}

// RunAsProxy serves, for the whole of m.Run, an emulator over a fresh root
// holding bucket, with its metadata listener (mopt) made the process's
// HTTP_PROXY and HTTPS_PROXY and its TLS authority the process's
// SSL_CERT_FILE: credentials-go's calls to https://sts.aliyuncs.com and
// http://100.100.100.200, fixed in that library, then reach it. net/http
// reads the proxy variables once per process, hence a TestMain helper:
// call it as os.Exit(ossemutest.RunAsProxy(m, bucket, opt, mopt, &p)).
// Loopback addresses are never proxied, so the test's other emulators are
// reached directly. p is set before m.Run.
func RunAsProxy(m *testing.M, bucket string, opt ossemu.Options, mopt ossemu.MetadataOptions, p *Process) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "ossemutest:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "ossemu-proxy-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, bucket), 0o755); err != nil {
		return fail(err)
	}
	srv, err := ossemu.New(dir, opt)
	if err != nil {
		return fail(err)
	}
	ca, err := srv.CACertPEM()
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o644)
	}
	if err != nil {
		return fail(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ctx, l) }()
	go func() { done <- srv.ServeMetadata(ctx, ml, mopt) }()
	*p = Process{Server: srv, Endpoint: "http://" + l.Addr().String(), Metadata: "http://" + ml.Addr().String()}
	os.Setenv("SSL_CERT_FILE", filepath.Join(dir, "ca.pem"))
	os.Setenv("HTTPS_PROXY", p.Metadata)
	os.Setenv("HTTP_PROXY", p.Metadata)
	os.Unsetenv("NO_PROXY")
	os.Unsetenv("no_proxy")
	code := m.Run()
	cancel()
	for range 2 {
		if err := <-done; err != nil && code == 0 {
			code = fail(err)
		}
	}
	return code
}

// WebToken is an unsigned OIDC token for audience aud expiring at exp, as
// a pod's projected service-account token looks to the emulator's STS
// (which reads its claims and does not check a signature).
func WebToken(aud string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:ml:trainer", "aud": aud, "exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc(claims) + "." + enc([]byte("signature"))
}

// WriteFile writes body to name (a relative path, directories made) in a
// fresh temporary directory with mode, and returns its path: the files
// credential chains read.
func WriteFile(t testing.TB, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}
