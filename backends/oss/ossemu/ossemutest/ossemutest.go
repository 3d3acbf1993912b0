// Package ossemutest runs an OSS emulator for tests in any package.
package ossemutest

import (
	"context"
	"net"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// Start serves root (DIR/<bucket>/<key>) with opt on a free loopback port
// until the test ends, and returns the server and its endpoint
// ("http://127.0.0.1:PORT"). An error from the server fails the test.
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
