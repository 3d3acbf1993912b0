package node

import (
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
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
