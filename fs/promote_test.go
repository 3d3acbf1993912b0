package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/cache"
	mfs "github.com/mlfsd/mlfsd/fs"
)

// TestWarmReadInSameMountIsPassthrough: a file read cold through a mount
// is handed to the kernel (passthrough) on the next open in the same mount,
// once its cache copy is complete, with no remount.
func TestWarmReadInSameMountIsPassthrough(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("promote me to passthrough\n"), 400_000) // ~10 MiB
	if err := os.WriteFile(filepath.Join(src, "shard"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Options{Dir: t.TempDir(), MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	v := c.View()
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{Source: v})
	path := filepath.Join(mnt, "shard")
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cold read: %v (or data differs)", err)
	}
	cold := v.Stats()
	if cold.PassthroughBytes != 0 {
		t.Fatalf("the cold open was handed to the kernel: %+v", cold)
	}
	// Open again until an open is handed to the kernel: the copy completes
	// behind the reader, so the first reopens may still be served by us.
	deadline := time.Now().Add(time.Minute)
	for v.Stats().PassthroughBytes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no reopen in the same mount used passthrough within a minute: %+v, cache %+v", v.Stats(), c.Stats())
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("warm read: %v (or data differs)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := v.Stats(); st.PassthroughBytes != int64(len(data)) {
		t.Fatalf("passthrough bytes %d, want the file's %d", st.PassthroughBytes, len(data))
	}
}

// TestSliceResultReleasedOnce: a reply hands its slices back exactly once,
// from Done, and a reply dropped without Done (go-fuse suppresses the reply
// of an interrupted request) still hands them back once it is garbage.
func TestSliceResultReleasedOnce(t *testing.T) {
	var n atomic.Int64
	r := mfs.NewSliceResultForTest([][]byte{[]byte("x")}, func() { n.Add(1) })
	r.Done()
	r.Done()
	if got := n.Load(); got != 1 {
		t.Fatalf("released %d times after two Done calls, want 1", got)
	}
	released := make(chan struct{})
	mfs.NewSliceResultForTest([][]byte{[]byte("y")}, func() { close(released) })
	deadline := time.Now().Add(time.Minute)
	for {
		runtime.GC()
		select {
		case <-released:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("a reply dropped without Done never released its slices")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSmallFileInKernelSkipsPassthrough: a small file that one daemon reply
// sent to the kernel whole is read again from the mount's page cache: later
// opens do not ask for passthrough (a backing file per open), and no read
// reaches the daemon.
func TestSmallFileInKernelSkipsPassthrough(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("a small image\n"), 7000) // ~96 KiB
	if err := os.WriteFile(filepath.Join(src, "img"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Options{Dir: t.TempDir(), MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	v := c.View()
	mnt := testMount(t, newNAS(t, src), mfs.InputOptions{Source: v})
	path := filepath.Join(mnt, "img")
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cold read: %v (or data differs)", err)
	}
	// Until the cache copy is complete, a reopen could not be passthrough
	// anyway: wait for it, so the test shows the choice, not the timing.
	deadline := time.Now().Add(time.Minute)
	for c.Stats().DiskBytes < int64(len(data)) {
		if time.Now().After(deadline) {
			t.Fatalf("the cache copy was not written within a minute: %+v", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	served := v.Stats().BytesServed
	for i := range 3 {
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("warm read %d: %v (or data differs)", i, err)
		}
	}
	st := v.Stats()
	if st.PassthroughBytes != 0 {
		t.Fatalf("a small file the kernel holds was opened with passthrough: %+v", st)
	}
	if st.BytesServed != served {
		t.Fatalf("warm reads reached the daemon (%d bytes), want the page cache to answer", st.BytesServed-served)
	}
}
