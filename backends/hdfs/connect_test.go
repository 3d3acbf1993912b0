package hdfs_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
)

// silentListener accepts TCP connections and never answers: the endpoint
// that once held `mlfsd mount` silent for 120 s. It returns host:port.
func silentListener(t *testing.T) string {
	t.Helper()
	addr, _ := countingSilentListener(t)
	return addr
}

// countingSilentListener is silentListener that also counts the
// connections it accepted.
func countingSilentListener(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	var accepted atomic.Int32
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String(), &accepted
}

// TestFirstContactSilentNamenode: New gives up after ConnectTimeout and
// names the namenode that did not answer.
func TestFirstContactSilentNamenode(t *testing.T) {
	addr := silentListener(t)
	u, err := backends.ParseURI("hdfs://" + addr + "/x/")
	if err != nil {
		t.Fatal(err)
	}
	// The guard only keeps a regression from hanging the suite; the
	// connect timeout under test is far shorter.
	guard, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		b, err := hdfs.New(guard, u, hdfs.Options{User: "root", ConnectTimeout: time.Second}, nil)
		if err == nil {
			b.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-guard.Done():
		t.Fatal("New still blocked when the test's guard expired")
	}
	if err == nil {
		t.Fatal("New succeeded against a namenode that never answers")
	}
	for _, want := range []string{addr, "did not answer within 1s", "connect timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, backends.ErrTransient) {
		t.Errorf("error %v is not ErrTransient", err)
	}
}
