package hdfs_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
)

// emulator starts an hdfsemu server over a fresh directory.
func emulator(t *testing.T, opt hdfsemu.Options) *hdfsemu.Server {
	t.Helper()
	if opt.Root == "" {
		opt.Root = t.TempDir()
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = 1 << 20 // small: every larger test file has many blocks
	}
	s, err := hdfsemu.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func open(t *testing.T, s *hdfsemu.Server, dir string, opt hdfs.Options) backends.Backend {
	t.Helper()
	u, err := backends.ParseURI("hdfs://" + s.Addr() + dir)
	if err != nil {
		t.Fatal(err)
	}
	if opt.User == "" {
		opt.User = "root"
	}
	b, err := hdfs.New(context.Background(), u, opt, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs the backend conformance suite against hdfsemu, with
// a 1 MiB block size so the large write spans 21 blocks.
func TestConformance(t *testing.T) {
	backendtest.RunOptions(t, func(t *testing.T) backends.Backend {
		s := emulator(t, hdfsemu.Options{})
		return open(t, s, "/data/", hdfs.Options{})
	}, backendtest.Options{RequireRenamer: true, RequireAppender: true, RequireDirMaker: true, ExclusiveWriter: true,
		ManyKeys: conformanceKeys, LargeSize: conformanceLarge})
}

// TestStagingHidden: a write in progress lives in a staging directory that
// no listing shows, at the root of its backend or below another backend's
// root, and whose name no key can use.
func TestStagingHidden(t *testing.T) {
	s := emulator(t, hdfsemu.Options{})
	inner := open(t, s, "/out/job/", hdfs.Options{})
	defer inner.Close()
	outer := open(t, s, "/", hdfs.Options{})
	defer outer.Close()
	ctx := t.Context()
	w, err := inner.Write(ctx, "model.bin", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort(ctx)
	if _, err := w.Write([]byte("in progress")); err != nil {
		t.Fatal(err)
	}
	for _, b := range []backends.Backend{inner, outer} {
		page, err := b.List(ctx, backends.ListOptions{Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Objects {
			if strings.Contains(o.Key, ".mlfsd-staging") {
				t.Errorf("%s lists %q", b.ID(), o.Key)
			}
		}
	}
	if _, err := outer.Stat(ctx, "out/job/.mlfsd-staging"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("Stat of a staging directory: %v", err)
	}
	if _, err := outer.Write(ctx, "a/.mlfsd-staging/x", backends.WriteOptions{}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Write into a staging directory: %v", err)
	}
}

// The suite's listing and streaming tests are sized to prove paging and
// multipart boundaries, not volume: 2,500 keys are 3 pages of the stores'
// 1,000-key page (and 4 of 777), 20 MiB+3 are 3 OSS parts (20 HDFS blocks)
// with an odd tail. The defaults (10,000 keys, 64 MiB) took 5 to 8 minutes
// each on a loaded 2-core machine.
const (
	conformanceKeys  = 2500
	conformanceLarge = 20<<20 + 3
)
