package hdfs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

func randData(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func readAll(t *testing.T, b backends.Backend, key string, off, n int64) ([]byte, error) {
	t.Helper()
	r, err := b.Read(t.Context(), key, backends.ReadOptions{Offset: off, Length: n})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// TestReadsSurviveDataNodeFaults: with the DataNode dropping a third of
// its block connections mid-block and refusing a tenth, whole and ranged
// reads of multi-block files still return exactly the right bytes.
func TestReadsSurviveDataNodeFaults(t *testing.T) {
	root := t.TempDir()
	data := randData(1, 40*4096+777) // 41 blocks of 4 KiB
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	os.WriteFile(filepath.Join(root, "d", "f"), data, 0o644)
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 4096, Faults: hdfsemu.Faults{DropRate: 0.3, ErrorRate: 0.1, Seed: 3}})
	b := open(t, s, "/d/", hdfs.Options{Retries: 12, RetryBackoff: time.Millisecond})
	defer b.Close()
	for i := 0; i < 5; i++ {
		got, err := readAll(t, b, "f", 0, -1)
		if err != nil {
			t.Fatalf("whole read #%d: %v", i, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("whole read #%d: %d bytes differ from the %d written", i, len(got), len(data))
		}
	}
	rng := rand.New(rand.NewSource(9))
	for i := 0; i < 50; i++ {
		off := rng.Int63n(int64(len(data)))
		n := rng.Int63n(20000)
		got, err := readAll(t, b, "f", off, n)
		if err != nil {
			t.Fatalf("read [%d,+%d): %v", off, n, err)
		}
		if want := data[off:min(int64(len(data)), off+n)]; !bytes.Equal(got, want) {
			t.Fatalf("read [%d,+%d): got %d bytes, want %d", off, n, len(got), len(want))
		}
	}
}

// TestReadMostConnectionsDropped: with the DataNode dropping 60% of its
// block connections part-way, reads complete, resuming where each
// connection died, ranged reads of a few bytes included (on reads smaller
// than a checksum chunk the library alone takes a drop for the end of the
// block and reconnects for the same chunk until one gets through).
func TestReadMostConnectionsDropped(t *testing.T) {
	root := t.TempDir()
	data := randData(2, 100000)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 4096, Faults: hdfsemu.Faults{DropRate: 0.6, Seed: 11}})
	b := open(t, s, "/", hdfs.Options{Retries: 20, RetryBackoff: time.Millisecond})
	defer b.Close()
	got, err := readAll(t, b, "f", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("whole read: %d bytes, %v", len(got), err)
	}
	for _, off := range []int64{0, 511, 4095, 4096, 99990} {
		got, err := readAll(t, b, "f", off, 7)
		if want := data[off:min(off+7, int64(len(data)))]; err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read [%d,+7): %q, %v", off, got, err)
		}
	}
}

// TestReadFailsCleanlyWithoutRetries: the faults are real (with one
// attempt and every block read refused, a read fails) and are reported as
// transient.
func TestReadFailsCleanlyWithoutRetries(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), randData(2, 100000), 0o644)
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 4096, Faults: hdfsemu.Faults{ErrorRate: 1}})
	b := open(t, s, "/", hdfs.Options{Retries: 1})
	defer b.Close()
	_, err := readAll(t, b, "f", 0, -1)
	if !errors.Is(err, backends.ErrTransient) {
		t.Fatalf("read with every DataNode request refused: %v, want ErrTransient", err)
	}
}

// TestNameNodeRetries: with a tenth of NameNode calls failing with
// RetriableException, every operation still succeeds.
func TestNameNodeRetries(t *testing.T) {
	s := emulator(t, hdfsemu.Options{BlockSize: 4096, Faults: hdfsemu.Faults{RPCErrorRate: 0.1, Seed: 5}})
	b := open(t, s, "/job/", hdfs.Options{Retries: 10, RetryBackoff: time.Millisecond})
	defer b.Close()
	ctx := t.Context()
	// A NameNode call inside a streaming write (addBlock, complete, ...)
	// that fails takes the write down with ErrTransient; like the
	// write-back queue, the test uploads again, and a failed attempt must
	// leave nothing behind.
	failures := 0
	for i := 0; i < 20; i++ {
		key := "out/" + string(rune('a'+i))
		data := randData(int64(i), 5000+i)
		for attempt := 1; ; attempt++ {
			w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: -1})
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.Write(data)
			if err == nil {
				_, err = w.Commit(ctx)
			} else {
				w.Abort(ctx)
			}
			if err == nil {
				break
			}
			failures++
			if !errors.Is(err, backends.ErrTransient) {
				t.Fatalf("write %s: %v, want ErrTransient", key, err)
			}
			if _, serr := b.Stat(ctx, key); !errors.Is(serr, backends.ErrNotExist) {
				t.Fatalf("failed write of %s left %v", key, serr)
			}
			if attempt == 30 {
				t.Fatalf("write %s failed 30 times: %v", key, err)
			}
		}
		got, err := readAll(t, b, key, 0, -1)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %s: %v", key, err)
		}
	}
	t.Logf("%d write attempts failed and were redone", failures)
	page, err := b.List(ctx, backends.ListOptions{Prefix: "out/"})
	if err != nil || len(page.Objects) != 20 {
		t.Fatalf("list: %d objects, %v", len(page.Objects), err)
	}
}

// TestWriteDroppedMidBlock: a DataNode that drops a write mid-block makes
// the write fail with ErrTransient, and nothing appears under the key or
// in the namespace.
func TestWriteDroppedMidBlock(t *testing.T) {
	root := t.TempDir()
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 1 << 20, Faults: hdfsemu.Faults{DropRate: 1}})
	b := open(t, s, "/out/", hdfs.Options{Retries: 2, RetryBackoff: time.Millisecond})
	ctx := t.Context()
	w, err := b.Write(ctx, "model.bin", backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = w.Write(randData(int64(i), 64<<10))
	}
	_, cerr := w.Commit(ctx)
	if werr == nil && cerr == nil {
		t.Fatal("a write through a DataNode that drops every block succeeded")
	}
	if err := errors.Join(werr, cerr); !errors.Is(err, backends.ErrTransient) {
		t.Errorf("write error %v, want ErrTransient", err)
	}
	if _, err := b.Stat(ctx, "model.bin"); !errors.Is(err, backends.ErrNotExist) {
		t.Errorf("after a failed write, Stat = %v, want ErrNotExist", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("files left in the namespace after a failed write: %v", left)
	}
}

// TestUnreachableNameNode: New fails with a clear, transient error.
func TestUnreachableNameNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u, _ := backends.ParseURI("hdfs://" + addr + "/data/")
	_, err = hdfs.New(t.Context(), u, hdfs.Options{User: "root", Retries: 2, RetryBackoff: time.Millisecond}, nil)
	if !errors.Is(err, backends.ErrTransient) || !strings.Contains(err.Error(), "cannot reach HDFS namenode "+addr) {
		t.Fatalf("New against a closed port: %v", err)
	}
}

// TestHANamenodes: the first NameNode of the list is down; the backend
// uses the second, whether the list comes from the URI or the options.
func TestHANamenodes(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), []byte("ha"), 0o644)
	s := emulator(t, hdfsemu.Options{Root: root})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		uri string
		opt hdfs.Options
	}{
		{"hdfs://" + dead + "," + s.Addr() + "/", hdfs.Options{User: "root"}},
		{"hdfs://cluster/", hdfs.Options{User: "root", Namenodes: []string{dead + "," + s.Addr()}}},
	} {
		u, err := backends.ParseURI(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hdfs.New(t.Context(), u, tc.opt, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.uri, err)
		}
		if got, err := readAll(t, b, "f", 0, -1); err != nil || string(got) != "ha" {
			t.Errorf("%s: read %q, %v", tc.uri, got, err)
		}
		b.Close()
	}
}

// TestNameserviceFromConfig: hdfs://<nameservice>/ resolves through
// hdfs-site.xml (dfs.ha.namenodes.*, dfs.namenode.rpc-address.*).
func TestNameserviceFromConfig(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), []byte("ns"), 0o644)
	s := emulator(t, hdfsemu.Options{Root: root})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	conf := t.TempDir()
	os.WriteFile(filepath.Join(conf, "hdfs-site.xml"), []byte(`<configuration>
<property><name>dfs.nameservices</name><value>openpai</value></property>
<property><name>dfs.ha.namenodes.openpai</name><value>nn1,nn2</value></property>
<property><name>dfs.namenode.rpc-address.openpai.nn1</name><value>`+dead+`</value></property>
<property><name>dfs.namenode.rpc-address.openpai.nn2</name><value>`+s.Addr()+`</value></property>
</configuration>`), 0o644)
	u, _ := backends.ParseURI("hdfs://openpai/")
	b, err := hdfs.New(t.Context(), u, hdfs.Options{User: "root", ConfDir: conf}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := readAll(t, b, "f", 0, -1); err != nil || string(got) != "ns" {
		t.Errorf("read %q, %v", got, err)
	}
}

// TestSafeMode: changes fail with ErrTransient naming safe mode once the
// retries run out, reads go on, and a NameNode that leaves safe mode
// while the backend retries lets the change through.
func TestSafeMode(t *testing.T) {
	s := emulator(t, hdfsemu.Options{SafeMode: true})
	b := open(t, s, "/", hdfs.Options{Retries: 2, RetryBackoff: time.Millisecond})
	defer b.Close()
	err := b.(backends.DirMaker).MakeDir(t.Context(), "x")
	if !errors.Is(err, backends.ErrTransient) || !strings.Contains(err.Error(), "safe mode") {
		t.Fatalf("MakeDir in safe mode: %v", err)
	}
	if _, err := b.List(t.Context(), backends.ListOptions{}); err != nil {
		t.Fatalf("List in safe mode: %v", err)
	}
	b2 := open(t, s, "/", hdfs.Options{Retries: 20, RetryBackoff: 20 * time.Millisecond})
	defer b2.Close()
	// Safe mode ends once b2's change was refused: while it retries.
	refused := s.SafeModeRefusals()
	go func() {
		testwait.Until(testwait.Guard, func() bool { return s.SafeModeRefusals() > refused })
		s.SetSafeMode(false)
	}()
	if err := b2.(backends.DirMaker).MakeDir(t.Context(), "x"); err != nil {
		t.Fatalf("MakeDir while safe mode ends: %v", err)
	}
}

// TestPermissionDenied: HDFS permission errors map to ErrPermission.
func TestPermissionDenied(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "ro"), 0o755)
	os.WriteFile(filepath.Join(root, "ro", "secret"), []byte("x"), 0o600)
	s := emulator(t, hdfsemu.Options{Root: root, Superuser: "root"})
	b := open(t, s, "/ro/", hdfs.Options{User: "alice"})
	defer b.Close()
	ctx := t.Context()
	_, err := readAll(t, b, "secret", 0, -1)
	if !errors.Is(err, backends.ErrPermission) {
		t.Errorf("read of a 0600 file of another user: %v", err)
	}
	w, err := b.Write(ctx, "new", backends.WriteOptions{SizeHint: -1})
	if err == nil {
		w.Write([]byte("x"))
		_, err = w.Commit(ctx)
	}
	if !errors.Is(err, backends.ErrPermission) {
		t.Errorf("write into a 0755 directory of another user: %v", err)
	}
	if err := b.Delete(ctx, "secret"); !errors.Is(err, backends.ErrPermission) {
		t.Errorf("delete in a 0755 directory of another user: %v", err)
	}
}

// TestBandwidthAndTTFB: the injected limits are honoured (lower bounds
// only; the durations are not a performance measurement).
func TestBandwidthAndTTFB(t *testing.T) {
	root := t.TempDir()
	data := randData(4, 512<<10)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	s := emulator(t, hdfsemu.Options{Root: root, Faults: hdfsemu.Faults{Bandwidth: 1 << 20, TTFB: 50 * time.Millisecond}})
	b := open(t, s, "/", hdfs.Options{})
	defer b.Close()
	start := time.Now()
	got, err := readAll(t, b, "f", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %v", err)
	}
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Errorf("512 KiB at 1 MiB/s plus 50ms TTFB took %v", d)
	}
}

// TestContextCancelsRead: a cancelled context stops a read in progress.
func TestContextCancelsRead(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), randData(5, 1<<20), 0o644)
	s := emulator(t, hdfsemu.Options{Root: root, BlockSize: 64 << 10})
	b := open(t, s, "/", hdfs.Options{})
	defer b.Close()
	ctx, cancel := context.WithCancel(t.Context())
	r, err := b.Read(ctx, "f", backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 1000)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
}

// TestNameNodeDropsConnections: the NameNode closes the connection instead
// of answering a tenth of the calls (after carrying them out). The backend
// replaces its broken client and retries; operations whose answer was lost
// (delete, rename) are recognised as done.
func TestNameNodeDropsConnections(t *testing.T) {
	s := emulator(t, hdfsemu.Options{BlockSize: 4096, Faults: hdfsemu.Faults{RPCDropRate: 0.1, Seed: 8}})
	b := open(t, s, "/job/", hdfs.Options{Retries: 10, RetryBackoff: time.Millisecond})
	defer b.Close()
	ctx := t.Context()
	for i := 0; i < 10; i++ {
		key := "k" + string(rune('a'+i))
		data := randData(int64(i), 3000)
		for attempt := 1; ; attempt++ {
			w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: -1})
			if err != nil {
				t.Fatalf("Write(%s): %v", key, err)
			}
			_, err = w.Write(data)
			if err == nil {
				_, err = w.Commit(ctx)
			} else {
				w.Abort(ctx)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, backends.ErrTransient) || attempt == 30 {
				t.Fatalf("write %s, attempt %d: %v", key, attempt, err)
			}
		}
		for j := 0; j < 3; j++ {
			got, err := readAll(t, b, key, 0, -1)
			if err != nil || !bytes.Equal(got, data) {
				st, serr := b.Stat(ctx, key)
				t.Fatalf("read %s (#%d): %d bytes, want %d, %v; stat %+v %v", key, j, len(got), len(data), err, st, serr)
			}
			if _, err := b.Stat(ctx, key); err != nil {
				t.Fatalf("stat %s: %v", key, err)
			}
		}
		if err := b.(backends.Renamer).Rename(ctx, key, "moved/"+key); err != nil {
			t.Fatalf("rename %s: %v", key, err)
		}
	}
	page, err := b.List(ctx, backends.ListOptions{Prefix: "moved/"})
	if err != nil || len(page.Objects) != 10 {
		t.Fatalf("list: %d objects, %v", len(page.Objects), err)
	}
	for _, o := range page.Objects {
		if err := b.Delete(ctx, o.Key); err != nil {
			t.Fatalf("delete %s: %v", o.Key, err)
		}
	}
	if page, err := b.List(ctx, backends.ListOptions{Recursive: true}); err != nil || len(page.Objects) != 1 || !page.Objects[0].IsDir {
		t.Fatalf("after deleting everything: %+v, %v", page.Objects, err)
	}
}

// TestHAFailover: two NameNodes serve the same namespace (two emulators
// over one directory); when the one in use goes away, the backend's next
// calls fail over to the other.
func TestHAFailover(t *testing.T) {
	root := t.TempDir()
	data := randData(7, 50000)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	nn1, err := hdfsemu.New(hdfsemu.Options{Root: root, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer nn1.Close()
	nn2 := emulator(t, hdfsemu.Options{Root: root, BlockSize: 4096})
	u, _ := backends.ParseURI("hdfs://" + nn1.Addr() + "," + nn2.Addr() + "/")
	b, err := hdfs.New(t.Context(), u, hdfs.Options{User: "root", RetryBackoff: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 8; i++ { // through every shared connection
		if got, err := readAll(t, b, "f", 0, -1); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read via nn1: %v", err)
		}
	}
	nn1.Close()
	for i := 0; i < 8; i++ {
		if got, err := readAll(t, b, "f", 1000, 20000); err != nil || !bytes.Equal(got, data[1000:21000]) {
			t.Fatalf("read #%d after nn1 went away: %v", i, err)
		}
		if _, err := b.Stat(t.Context(), "f"); err != nil {
			t.Fatalf("stat #%d after nn1 went away: %v", i, err)
		}
	}
}
