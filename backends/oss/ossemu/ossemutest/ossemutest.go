// Package ossemutest runs an OSS emulator for tests in any package.
package ossemutest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

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
