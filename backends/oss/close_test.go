package oss

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
)

// openFds counts the process's open file descriptors.
func openFds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestCloseReleasesConnections: a closed backend keeps no connection and
// no goroutine. 40 backends are opened, each reads four objects at once
// (four connections) and is closed; the process's descriptors and
// goroutines (the emulator's included: it is in this process, and ends a
// connection when the client closes it) then come back to what they were.
// Before Close closed its idle connections, each closed backend kept them
// for the SDK's IdleConnTimeout, 120 s: the wait below, which polls the
// counts, would run into its 60 s hang guard.
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
	fds, gs := settle(t, -1, -1)
	for range 40 {
		cycle()
	}
	settle(t, fds, gs)
}

// settle waits until the process's descriptors and goroutines are back to
// at most fds and gs (plus a little slack for runtime and test
// goroutines), and returns the counts it saw. Negative bounds only let
// the counts stop falling.
func settle(t *testing.T, fds, gs int) (int, int) {
	t.Helper()
	guard := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	prevF, prevG := -1, -1
	for {
		runtime.GC()
		f, g := openFds(t), runtime.NumGoroutine()
		switch {
		case fds >= 0 && f <= fds+2 && g <= gs+2:
			return f, g
		case fds < 0 && f == prevF && g == prevG:
			return f, g
		case time.Now().After(guard):
			t.Fatalf("after closing every backend: %d descriptors and %d goroutines, against %d and %d before", f, g, fds, gs)
		}
		prevF, prevG = f, g
		<-tick.C
	}
}
