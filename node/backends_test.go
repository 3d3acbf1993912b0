package node

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

type nopCounter struct{ requests int }

func (c *nopCounter) request(string, error, time.Duration) { c.requests++ }
func (c *nopCounter) readBytes(int)                        {}

// The metrics decorator must not hide what writeback and the output tree
// discover by interface: a hidden NameLimiter or Linker would silently turn
// ENAMETOOLONG into failed uploads and symlinks into EPERM on daemon mounts.
func TestInstrumentKeepsOptionalInterfaces(t *testing.T) {
	u, err := backends.ParseURI("nas://" + t.TempDir() + "/")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := nas.New(t.Context(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := &nopCounter{}
	b := instrument(raw, m)
	if _, ok := backends.As[backends.Linker](b); !ok {
		t.Error("Linker hidden by the decorator")
	}
	if _, ok := backends.As[backends.NameLimiter](b); !ok {
		t.Error("NameLimiter hidden by the decorator")
	}
	if _, ok := backends.As[backends.Renamer](b); !ok {
		t.Error("Renamer hidden by the decorator")
	}
	if _, ok := backends.As[backends.Copier](b); ok {
		t.Error("NAS has no Copier, but As found one")
	}
	if _, err := b.Stat(t.Context(), "missing"); err == nil {
		t.Error("Stat of a missing key: no error")
	}
	if m.requests != 1 {
		t.Errorf("requests counted = %d, want 1", m.requests)
	}
}

// opsCounter records the operation of each request.
type opsCounter struct {
	mu  sync.Mutex
	ops []string
}

func (c *opsCounter) request(op string, _ error, d time.Duration) {
	c.mu.Lock()
	c.ops = append(c.ops, op)
	c.mu.Unlock()
}
func (c *opsCounter) readBytes(int) {}

// TestInstrumentTellsMultipart: an upload the store took as a multipart
// upload counts as op "multipart", one sent as a single PUT as "write",
// each once, at its commit; the caller's OnUpload is still told the ID.
func TestInstrumentTellsMultipart(t *testing.T) {
	_, ep, _ := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	t.Setenv("OSS_ACCESS_KEY_ID", ossemutest.AccessKeyID)
	t.Setenv("OSS_ACCESS_KEY_SECRET", ossemutest.AccessKeySecret)
	t.Setenv("OSS_SESSION_TOKEN", "")
	u, err := backends.ParseURI("oss://bkt/d/")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := oss.New(t.Context(), u, oss.Options{Endpoint: ep, MultipartThreshold: 1 << 20, PartSize: 512 << 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := &opsCounter{}
	b := instrument(raw, m)
	var told []string
	for _, size := range []int{100 << 10, 3 << 20} {
		w, err := b.Write(t.Context(), "obj", backends.WriteOptions{SizeHint: int64(size), OnUpload: func(id string) { told = append(told, id) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(randomBytes(t, size)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Equal(m.ops, []string{"write", "multipart"}) {
		t.Errorf("requests counted: %v; want write (100 KiB) then multipart (3 MiB)", m.ops)
	}
	if len(told) != 1 || told[0] == "" {
		t.Errorf("the caller's OnUpload was told %q; want the multipart upload's ID", told)
	}
}
