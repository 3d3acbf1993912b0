package oss

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/leakcheck"
)

// TestCloseReleasesConnections: a closed backend keeps no connection and
// no goroutine. 40 backends are opened, each reads four objects at once
// (four connections) and is closed; the process's descriptors and
// goroutines (the emulator's included: it is in this process, and ends a
// connection when the client closes it) then come back to what they were.
// Before Close closed its idle connections, each closed backend kept them
// for the SDK's IdleConnTimeout, 120 s: the wait below, which polls the
// counts, would run into its hang guard (leakcheck.Guard, 60 s).
func TestCloseReleasesConnections(t *testing.T) {
	setCreds(t)
	e := startEmu(t, ossemu.Options{})
	keys := []string{"a", "b", "c", "d"}
	if err := os.MkdirAll(filepath.Join(e.root, testBucket, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join(e.root, testBucket, "data", k), make([]byte, 256<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cycle := func() {
		b := openURI(t, "oss://"+testBucket+"/data/", Options{Endpoint: e.endpoint, Retry: fastRetry})
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Go(func() {
				r, err := b.Read(t.Context(), k, backends.ReadOptions{Length: -1})
				if err != nil {
					t.Error(err)
					return
				}
				defer r.Close()
				if n, err := io.Copy(io.Discard, r); err != nil || n != 256<<10 {
					t.Errorf("read %s: %d bytes, %v", k, n, err)
				}
			})
		}
		wg.Wait()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// One cycle first, so that what stays for the life of the process
	// (the emulator's listener, runtime workers) is in the baseline.
	cycle()
	base := leakcheck.Baseline(t)
	for range 40 {
		cycle()
	}
	leakcheck.Back(t, base, "after closing every backend")
}
