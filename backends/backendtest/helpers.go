package backendtest

import (
	"errors"
	"io"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// WriteReadBack writes a small object at key through b and reads it back,
// failing the test unless the content round-trips: the one-line proof,
// in a backend's own tests, that b reaches its store with working keys.
func WriteReadBack(t testing.TB, b backends.Backend, key string) {
	t.Helper()
	ctx := t.Context()
	w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data of " + key)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
	r, err := b.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "data of "+key {
		t.Fatalf("read %s: %q, %v", key, got, err)
	}
}

// sentinels are the storage contract's sentinel errors.
var sentinels = []error{
	backends.ErrNotExist, backends.ErrExist, backends.ErrPermission, backends.ErrNotEmpty,
	backends.ErrIsDir, backends.ErrNotDir, backends.ErrInvalid, backends.ErrUnsupported,
	backends.ErrVersionMismatch, backends.ErrNoSpace, backends.ErrTransient, backends.ErrNameTooLong,
}

// WantSentinel fails the test unless err carries the sentinel want (nil:
// none) and no other sentinel of the contract: a backend's error mapping
// must give each failure exactly one meaning.
func WantSentinel(t testing.TB, err, want error) {
	t.Helper()
	for _, s := range sentinels {
		if errors.Is(err, s) != (s == want) {
			t.Errorf("%v: errors.Is(%v) = %v", err, s, errors.Is(err, s))
		}
	}
}
