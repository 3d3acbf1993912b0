package backendtest

import (
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
