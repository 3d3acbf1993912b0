package hdfsemu_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
)

const testBlockSize = 4096

func start(t *testing.T, opt hdfsemu.Options) (*hdfsemu.Server, string) {
	t.Helper()
	if opt.Root == "" {
		opt.Root = t.TempDir()
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = testBlockSize
	}
	s, err := hdfsemu.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, opt.Root
}

func client(t *testing.T, s *hdfsemu.Server, user string) *hdfs.Client {
	t.Helper()
	c, err := hdfs.NewClient(hdfs.ClientOptions{Addresses: []string{s.Addr()}, User: user})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// TestRealClientReads seeds a tree with ordinary file tools and reads it
// back through the unmodified client: stat, listing (paged), multi-block
// files, ranged reads at block edges.
func TestRealClientReads(t *testing.T) {
	s, root := start(t, hdfsemu.Options{ListingLimit: 7})
	big := randBytes(1, 5*testBlockSize+123) // 6 blocks, the last partial
	if err := os.MkdirAll(filepath.Join(root, "data", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "data", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(root, "data", "empty"), nil, 0o644)
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(root, "data", "sub", "f"+string(rune('a'+i))), []byte{byte(i)}, 0o644)
	}
	c := client(t, s, "alice")

	fi, err := c.Stat("/data/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(big)) || fi.IsDir() || fi.Name() != "big.bin" {
		t.Fatalf("stat: size %d dir %v name %q", fi.Size(), fi.IsDir(), fi.Name())
	}
	if _, err := c.Stat("/data/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat missing: %v, want ErrNotExist", err)
	}
	got, err := c.ReadFile("/data/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("multi-block read differs (%d vs %d bytes)", len(got), len(big))
	}
	if got, err := c.ReadFile("/data/empty"); err != nil || len(got) != 0 {
		t.Fatalf("empty file: %q %v", got, err)
	}
	f, err := c.Open("/data/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{0, 1, 511, 512, testBlockSize - 1, testBlockSize, 3*testBlockSize + 700, int64(len(big)) - 10} {
		buf := make([]byte, 1000)
		n, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatalf("ReadAt %d: %v", off, err)
		}
		want := big[off:min(int64(len(big)), off+1000)]
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("ReadAt %d: got %d bytes, differ from want %d", off, n, len(want))
		}
	}
	ents, err := c.ReadDir("/data/sub")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 20 || !sort.SliceIsSorted(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() }) {
		t.Fatalf("listing of 20 entries over pages of 7: got %d", len(ents))
	}
	ents, err = c.ReadDir("/data")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "big.bin,empty,sub" || !ents[2].IsDir() {
		t.Fatalf("listing /data: %v", names)
	}
	cs, err := c.GetContentSummary("/data")
	if err != nil {
		t.Fatal(err)
	}
	if cs.FileCount() != 22 || cs.Size() != int64(len(big))+20 {
		t.Fatalf("content summary: %d files, %d bytes", cs.FileCount(), cs.Size())
	}
	if _, err := c.StatFs(); err != nil {
		t.Fatal(err)
	}
}

// TestRealClientWrites writes multi-block files, appends, renames and
// deletes through the client and checks the results on disk.
func TestRealClientWrites(t *testing.T) {
	s, root := start(t, hdfsemu.Options{})
	c := client(t, s, "root")
	data := randBytes(2, 3*testBlockSize+1000)
	if err := c.MkdirAll("/out/job", 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := c.Create("/out/job/model.bin")
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized writes cross chunk and block boundaries.
	for off := 0; off < len(data); {
		n := min(777, len(data)-off)
		if _, err := w.Write(data[off : off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(root, "out", "job", "model.bin"))
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("written file on disk: %d bytes, err %v; want %d bytes", len(onDisk), err, len(data))
	}
	if got, err := c.ReadFile("/out/job/model.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	// Append into the partial last block and on into new blocks.
	more := randBytes(3, 2*testBlockSize)
	a, err := c.Append("/out/job/model.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(more); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data...), more...)
	if got, err := c.ReadFile("/out/job/model.bin"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after append: %d bytes, %v", len(got), err)
	}
	if _, err := c.Create("/out/job/model.bin"); !errors.Is(err, os.ErrExist) {
		t.Fatalf("create over existing: %v", err)
	}
	if err := c.Rename("/out/job/model.bin", "/out/final.bin"); err != nil {
		t.Fatal(err)
	}
	if onDisk, err := os.ReadFile(filepath.Join(root, "out", "final.bin")); err != nil || !bytes.Equal(onDisk, want) {
		t.Fatalf("renamed file: %v", err)
	}
	if err := c.Remove("/out"); err == nil {
		t.Fatal("removing a non-empty directory succeeded")
	}
	if err := c.Remove("/out/final.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "out", "final.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted file still on disk: %v", err)
	}
	if err := c.CreateEmptyFile("/out/empty"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "out", "empty")); err != nil || fi.Size() != 0 {
		t.Fatalf("empty file: %v", err)
	}
	mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := c.Chtimes("/out/empty", mt, mt); err != nil {
		t.Fatal(err)
	}
	if fi, _ := c.Stat("/out/empty"); !fi.ModTime().Equal(mt) {
		t.Fatalf("mtime %v, want %v", fi.ModTime(), mt)
	}
	if err := c.Chmod("/out/empty", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "out", "empty")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

// TestPermissionsAndSafeMode checks the errors a client must tell apart.
func TestPermissionsAndSafeMode(t *testing.T) {
	s, root := start(t, hdfsemu.Options{Superuser: "root"})
	os.MkdirAll(filepath.Join(root, "locked"), 0o755)
	os.WriteFile(filepath.Join(root, "secret"), []byte("x"), 0o600)
	alice := client(t, s, "alice")
	if _, err := alice.Create("/locked/f"); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("create in a root-owned 0755 directory as alice: %v, want permission denied", err)
	}
	// The client reports getBlockLocations failures as the raw remote error.
	var he hdfs.Error
	if _, err := alice.ReadFile("/secret"); !errors.As(err, &he) || !strings.HasSuffix(he.Exception(), "AccessControlException") {
		t.Fatalf("read of a 0600 root file as alice: %v", err)
	}
	os.Chmod(filepath.Join(root, "locked"), 0o777)
	if err := alice.MkdirAll("/locked/mine/deeper", 0o755); err != nil {
		t.Fatalf("alice mkdir in a 0777 directory: %v", err)
	}
	if err := alice.CreateEmptyFile("/locked/mine/deeper/f"); err != nil {
		t.Fatalf("alice writes in her own directory: %v", err)
	}
	s.SetSafeMode(true)
	root2 := client(t, s, "root")
	err := root2.Mkdir("/x", 0o755)
	if !errors.As(err, &he) || !strings.Contains(he.Exception(), "SafeModeException") {
		t.Fatalf("mkdir in safe mode: %v", err)
	}
	if _, err := root2.Stat("/locked"); err != nil {
		t.Fatalf("reads work in safe mode: %v", err)
	}
	s.SetSafeMode(false)
	if err := root2.Mkdir("/x", 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestDataNodeOnAllInterfaces: a DataNode listening on 0.0.0.0 is
// advertised at the address the client reached the NameNode at.
func TestDataNodeOnAllInterfaces(t *testing.T) {
	root := t.TempDir()
	data := randBytes(9, 3*testBlockSize)
	os.WriteFile(filepath.Join(root, "f"), data, 0o644)
	s, _ := start(t, hdfsemu.Options{Root: root, DataNodeListen: "0.0.0.0:0"})
	c := client(t, s, "root")
	if got, err := c.ReadFile("/f"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through a DataNode on 0.0.0.0: %v", err)
	}
}
