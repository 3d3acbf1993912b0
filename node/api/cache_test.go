package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
)

// TestCacheEndpoints: du, warm (with its progress) and clear through the
// API, as `mlfsd cache` uses them; unknown warm-ups are a 404, bad
// requests a 400 that says why.
func TestCacheEndpoints(t *testing.T) {
	s := node.Defaults()
	s.Cache.Dir = t.TempDir()
	s.Cache.FreeFloorBytes = 0
	s.Output.StagingDir = t.TempDir()
	n, err := node.New(t.Context(), node.Options{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	serveNode(t, n, sock)
	c := NewClient(sock)
	ctx := t.Context()

	src := t.TempDir()
	data := strings.Repeat("mlfsd", 300_000)
	for _, name := range []string{"x.bin", "y.bin"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	uri := "nas://" + src + "/"
	st, err := c.Warm(ctx, node.WarmRequest{URI: uri, Files: []string{"x.bin"}, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	testwait.EventuallyNoError(t, func() error {
		if st, err = c.WarmStatus(ctx, st.ID); err == nil && !st.Ended() {
			err = errors.New(st.State)
		}
		return err
	}, "the warm-up to end")
	if st.State != node.WarmDone || st.Files != 1 || st.BytesFetched != int64(len(data)) {
		t.Fatalf("warm-up: %+v; want x.bin's %d bytes fetched", st, len(data))
	}
	var u node.CacheUsage
	testwait.EventuallyNoError(t, func() error {
		if u, err = c.CacheUsage(ctx); err == nil && (len(u.Datasets) != 1 || u.Datasets[0].Complete != 1) {
			err = errors.New("not complete on disk yet")
		}
		return err
	}, "x.bin complete on disk")
	if d := u.Datasets[0]; d.Dataset != uri || d.DiskBytes < int64(len(data)) || len(u.Warms) != 1 {
		t.Errorf("du: %+v", u)
	}
	if _, err := c.CancelWarm(ctx, st.ID); err != nil {
		t.Errorf("cancelling an ended warm-up: %v", err)
	}
	var ae *Error
	if _, err := c.WarmStatus(ctx, "warm-99"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Errorf("an unknown warm-up: %v; want a 404", err)
	}
	if _, err := c.Warm(ctx, node.WarmRequest{URI: "nas:relative/"}); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("a bad URI: %v; want a 400", err)
	}
	if _, err := c.Warm(ctx, node.WarmRequest{Target: "relative/dir", URI: uri}); err == nil || !strings.Contains(err.Error(), "not mounted") {
		t.Errorf("a warm-up through a target nothing is mounted at: %v", err)
	}
	res, err := c.ClearCache(ctx, node.ClearRequest{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects != 1 || res.DiskBytes < int64(len(data)) {
		t.Errorf("clear: %+v", res)
	}
	if u, err = c.CacheUsage(ctx); err != nil || len(u.Datasets) != 0 {
		t.Errorf("du after the clear: %+v, %v", u, err)
	}
}
