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

// TestIdentityIgnoresEndpoint: the staging identity of a channel is that
// of its store (the full table is backends' TestSameStore).
func TestIdentityIgnoresEndpoint(t *testing.T) {
	for _, tc := range [][2]string{
		{"oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"},
		{"hdfs://nn1:8020,nn2:8020/out/", "hdfs://nn2:9000,nn1:9000/out/"},
	} {
		if a, b := identityOfID(tc[0]), identityOfID(tc[1]); a != b {
			t.Errorf("identity of %s = %q, of %s = %q; want equal", tc[0], a, tc[1], b)
		}
	}
	for _, tc := range [][2]string{
		{"oss://bkt/out/", "oss://bkt/other/"},
		{"oss://bkt/out/", "oss://bkt2/out/"},
		{"oss://bkt.127.0.0.1:9000/out/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"},
		{"hdfs://nn1:8020/out/", "hdfs://nn3:8020/out/"},
	} {
		if a, b := identityOfID(tc[0]), identityOfID(tc[1]); backends.SameStore(a, b) {
			t.Errorf("%s (%q) and %s (%q) count as one store", tc[0], a, tc[1], b)
		}
	}
}

// TestRecoverWithAnotherEndpoint: closed files pending at a crash are
// uploaded by a restart that reaches the same bucket through another
// endpoint (written through the internal endpoint in the bucket.endpoint
// form PAI prints, uploaded after a restart with the public one), also
// from a staging dir an earlier version keyed by address;
// pending files of another channel are reported, not touched.
func TestRecoverWithAnotherEndpoint(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "current", true: "legacy"}[legacy], func(t *testing.T) {
			nb, dir := newNAS(t)
			f := newFaulty(nb)
			staging := t.TempDir()
			s1 := openStore(t, addressed{f, "oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/"}, staging, nil)
			f.hold()
			data := randBytes(3, 100<<10)
			writeFile(t, s1, "ckpt", data)
			closeStore(t, s1) // the crash: the upload never finished
			f.release()
			if legacy {
				// As an earlier version left it: keyed by the address.
				old := filepath.Join(staging, keyOf("oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/"))
				must(t, os.Rename(s1.dir, old))
				must(t, os.Remove(filepath.Join(old, identityFile)))
			}
			// Another channel's pending file in the same staging dir.
			other, _ := newNAS(t)
			otherF := newFaulty(other)
			so := openStore(t, otherF, staging, nil)
			otherF.hold()
			writeFile(t, so, "theirs", []byte("x"))
			closeStore(t, so)
			otherF.release()

			var logs syncBuf
			s2 := openStore(t, addressed{nb, "oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"}, staging, func(o *Options) {
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
	closeStore(t, s)
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
	closeStore(t, s1)
	f.release()
	must(t, os.WriteFile(filepath.Join(s1.jr.dir, "0123456789abcdef.json"), []byte(`{"id":"0123`), 0o600))
	s2 := openStore(t, nb, staging, nil)
	err := s2.Drain(context.Background(), nil)
	if !errors.Is(err, ErrUploadFailed) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Drain = %v, want ErrUploadFailed reporting the corrupt record", err)
	}
	wantFile(t, dir, "good", []byte("closed"))
	closeStore(t, s2)
	s3 := openStore(t, nb, staging, nil)
	drain(t, s3)
}

// identified gives a backend an ID and a data identity of its own, as the
// HDFS backend has (backends.DataIdentifier).
type identified struct {
	backends.Backend
	id, dataID string
}

func (a identified) ID() string     { return a.id }
func (a identified) DataID() string { return a.dataID }

// TestRecoverSameStoreOtherName: files pending at a crash under one name of
// a store are uploaded by a restart under another name of the same store,
// and only reported when the other name is another store.
func TestRecoverSameStoreOtherName(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after backends.Backend // with the NAS backend filled in below
		same          bool
	}{
		{"hdfs nameservice, then one of its namenodes",
			identified{id: "hdfs://openpai/out/", dataID: backends.HDFSIdentity([]string{"openpai", "nn1:8020", "nn2:8020", "10.0.0.1", "10.0.0.2"}, "/out/")},
			addressed{id: "hdfs://nn2:8020/out/"}, true},
		{"hdfs namenode by address, then by name",
			identified{id: "hdfs://10.0.0.1:8020/out/", dataID: backends.HDFSIdentity([]string{"10.0.0.1:8020", "10.0.0.1"}, "/out/")},
			identified{id: "hdfs://nn1.example:8020/out/", dataID: backends.HDFSIdentity([]string{"nn1.example:8020", "10.0.0.1"}, "/out/")}, true},
		{"oss dual-stack endpoint, then the internal one",
			addressed{id: "oss://bkt.cn-hangzhou.oss.aliyuncs.com/out/"},
			addressed{id: "oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/"}, true},
		{"oss custom endpoint, then another",
			addressed{id: "oss://bkt.127.0.0.1:9000/out/"},
			addressed{id: "oss://bkt.127.0.0.1:9001/out/"}, false},
		{"hdfs, then another cluster",
			addressed{id: "hdfs://nn1:8020,nn2:8020/out/"},
			addressed{id: "hdfs://nn3:8020/out/"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nb, dir := newNAS(t)
			f := newFaulty(nb)
			with := func(b backends.Backend, inner backends.Backend) backends.Backend {
				switch b := b.(type) {
				case identified:
					b.Backend = inner
					return b
				case addressed:
					b.Backend = inner
					return b
				}
				t.Fatalf("unexpected backend %T", b)
				return nil
			}
			staging := t.TempDir()
			s1 := openStore(t, with(tc.before, f), staging, nil)
			f.hold()
			data := randBytes(5, 10<<10)
			writeFile(t, s1, "ckpt", data)
			closeStore(t, s1) // the crash: the upload never finished
			f.release()

			var logs syncBuf
			s2 := openStore(t, with(tc.after, nb), staging, func(o *Options) {
				o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			drain(t, s2)
			if tc.same {
				wantFile(t, dir, "ckpt", data)
				return
			}
			if _, err := os.Stat(filepath.Join(dir, "ckpt")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a file staged for %s was uploaded by %s (stat: %v)", tc.before.ID(), tc.after.ID(), err)
			}
			if !strings.Contains(logs.String(), "another output channel") || !strings.Contains(logs.String(), tc.before.ID()) {
				t.Errorf("the pending file of %s was not reported; log:\n%s", tc.before.ID(), logs.String())
			}
		})
	}
}
