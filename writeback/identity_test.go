package writeback

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// addressed gives a backend another ID (the address it is reached at).
type addressed struct {
	backends.Backend
	id string
}

func (a addressed) ID() string { return a.id }

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestIdentityIgnoresEndpoint(t *testing.T) {
	for _, tc := range [][2]string{
		{"oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"},
		{"oss://bkt.127.0.0.1:9000/out/", "oss://bkt/out/"},
		{"hdfs://nn1:8020,nn2:8020/out/", "hdfs://nn2:9000,nn1:9000/out/"},
	} {
		if a, b := identityOfID(tc[0]), identityOfID(tc[1]); a != b {
			t.Errorf("identity of %s = %q, of %s = %q; want equal", tc[0], a, tc[1], b)
		}
	}
	for _, tc := range [][2]string{
		{"oss://bkt/out/", "oss://bkt/other/"},
		{"oss://bkt/out/", "oss://bkt2/out/"},
		{"hdfs://nn1:8020/out/", "hdfs://nn3:8020/out/"},
	} {
		if a, b := identityOfID(tc[0]), identityOfID(tc[1]); a == b {
			t.Errorf("%s and %s share the identity %q", tc[0], tc[1], a)
		}
	}
}

// TestRecoverWithAnotherEndpoint: closed files pending at a crash are
// uploaded by a restart that reaches the same bucket through another
// endpoint, also from a staging dir an earlier version keyed by address;
// pending files of another channel are reported, not touched.
func TestRecoverWithAnotherEndpoint(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "current", true: "legacy"}[legacy], func(t *testing.T) {
			nb, dir := newNAS(t)
			f := newFaulty(nb)
			staging := t.TempDir()
			s1 := openStore(t, addressed{f, "oss://bkt.internal.example:80/out/"}, staging, nil)
			f.hold()
			data := randBytes(3, 100<<10)
			writeFile(t, s1, "ckpt", data)
			s1.Close() // the crash: the upload never finished
			f.release()
			if legacy {
				// As an earlier version left it: keyed by the address.
				old := filepath.Join(staging, keyOf("oss://bkt.internal.example:80/out/"))
				must(t, os.Rename(s1.dir, old))
				must(t, os.Remove(filepath.Join(old, identityFile)))
			}
			// Another channel's pending file in the same staging dir.
			other, _ := newNAS(t)
			otherF := newFaulty(other)
			so := openStore(t, otherF, staging, nil)
			otherF.hold()
			writeFile(t, so, "theirs", []byte("x"))
			so.Close()
			otherF.release()

			var logs syncBuf
			s2 := openStore(t, addressed{nb, "oss://bkt.public.example:443/out/"}, staging, func(o *Options) {
				o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			drain(t, s2)
			wantFile(t, dir, "ckpt", data)
			if !strings.Contains(logs.String(), "another output channel") || !strings.Contains(logs.String(), other.ID()) {
				t.Errorf("the other channel's pending file was not reported; log:\n%s", logs.String())
			}
		})
	}
}

// TestNameTooLongNeverBlocks: the Store refuses a name the backend cannot
// hold; a file staged under such a name anyway (by an earlier version) is
// set aside at its first failed upload, reported once, never blocks the
// other files, can be unlinked, and the next start is clean.
func TestNameTooLongNeverBlocks(t *testing.T) {
	nb, dir := newNAS(t)
	staging := t.TempDir()
	s := openStore(t, nb, staging, nil)
	long := strings.Repeat("n", 256)
	if err := s.CheckName(long); !errors.Is(err, backends.ErrNameTooLong) {
		t.Fatalf("CheckName(256 bytes) = %v, want ErrNameTooLong", err)
	}
	must(t, s.CheckName("d/"+strings.Repeat("k", 255)))
	writeFile(t, s, long, []byte("never uploadable"))
	writeFile(t, s, "fine", []byte("ok"))
	err := s.Drain(context.Background(), nil)
	if !errors.Is(err, ErrUploadFailed) || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("Drain = %v, want ErrUploadFailed for the long name", err)
	}
	wantFile(t, dir, "fine", []byte("ok"))
	must(t, s.Remove(context.Background(), long))
	s.Close()
	s2 := openStore(t, nb, staging, nil)
	drain(t, s2) // nothing pending, nothing failing
}

// TestCorruptRecordNeverWedges: a journal record that cannot be read
// (torn by a machine crash) is set aside and reported; the channel starts,
// the other closed files upload, and the next start is clean.
func TestCorruptRecordNeverWedges(t *testing.T) {
	nb, dir := newNAS(t)
	f := newFaulty(nb)
	staging := t.TempDir()
	s1 := openStore(t, f, staging, nil)
	f.hold()
	writeFile(t, s1, "good", []byte("closed"))
	s1.Close()
	f.release()
	must(t, os.WriteFile(filepath.Join(s1.jr.dir, "0123456789abcdef.json"), []byte(`{"id":"0123`), 0o600))
	s2 := openStore(t, nb, staging, nil)
	err := s2.Drain(context.Background(), nil)
	if !errors.Is(err, ErrUploadFailed) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Drain = %v, want ErrUploadFailed reporting the corrupt record", err)
	}
	wantFile(t, dir, "good", []byte("closed"))
	s2.Close()
	s3 := openStore(t, nb, staging, nil)
	drain(t, s3)
}
