package wbbench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/writeback"
)

// TestHDFSBackend runs the write path against the HDFS emulator: files of
// one and of many blocks, a file rename, a directory rename (server-side),
// an unlink, then a drain; the namenode must hold exactly the result.
func TestHDFSBackend(t *testing.T) {
	srv, err := hdfsemu.New(hdfsemu.Options{Root: t.TempDir(), BlockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	u, err := backends.ParseURI("hdfs://" + srv.Addr() + "/out/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hdfs.New(context.Background(), u, hdfs.Options{User: "root"}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	st, err := writeback.Open(context.Background(), b, writeback.Options{StagingDir: t.TempDir(),
		MinBackoff: time.Millisecond, Log: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	put := func(key string, data []byte) {
		t.Helper()
		h, err := st.Open(ctx, key, nil, writeback.OpenFlags{Write: true, Truncate: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	big, small := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16+5), []byte("small")
	if err := st.MakeDir(ctx, "run1"); err != nil {
		t.Fatal(err)
	}
	put("run1/model.pt", big)
	put("run1/tmp.pt", small)
	put("log.txt", small)
	if err := st.Rename(ctx, "run1/tmp.pt", "run1/final.pt"); err != nil {
		t.Fatal(err)
	}
	if err := st.Remove(ctx, "log.txt"); err != nil {
		t.Fatal(err)
	}
	if err := st.Drain(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.RenameDir(ctx, "run1", "best"); err != nil { // durable files: server-side
		t.Fatal(err)
	}
	for key, want := range map[string][]byte{"best/model.pt": big, "best/final.pt": small} {
		r, err := b.Read(ctx, key, backends.ReadOptions{Length: -1})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes (err %v), want %d", key, len(got), err, len(want))
		}
	}
	for _, key := range []string{"log.txt", "run1/tmp.pt", "run1/model.pt", "run1"} {
		if _, err := b.Stat(ctx, key); !errors.Is(err, backends.ErrNotExist) {
			t.Errorf("%s: Stat = %v, want ErrNotExist", key, err)
		}
	}
}
