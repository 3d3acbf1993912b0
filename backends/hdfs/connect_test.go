package hdfs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/endpointtest"
	"github.com/mlfsd/mlfsd/backends/hdfs"
)

// TestFirstContactSilentNamenode: New gives up after ConnectTimeout and
// names the namenode that did not answer.
func TestFirstContactSilentNamenode(t *testing.T) {
	addr := endpointtest.Silent(t)
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
