package dirindex

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/internal/testwait"
)

func seed(t *testing.T, dir string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func names(ents []Entry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name)
	}
	return out
}

// waitTrusted polls until dir's last change is old enough for an index
// of it to be trusted (no event signals the passing of time).
func waitTrusted(t *testing.T, dir string) {
	t.Helper()
	testwait.Eventually(t, func() bool {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		return time.Since(time.Unix(0, st.Ctim.Nano())) > racy+racy/2
	}, "the directory's ctime to be %v in the past", racy+racy/2)
}

// TestOrderAndKeys: entries come sorted by the key function (a directory
// as "name/", as object keys sort), symlinks typed by their target and
// dangling ones left out; a missing directory is not ok.
func TestOrderAndKeys(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b.txt", "b0", "a"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b", filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	c := New(func(name string, isDir bool) string {
		if isDir {
			return name + "/"
		}
		return name
	})
	ents, ok := c.Entries(dir)
	if !ok {
		t.Fatal("not ok")
	}
	if got, want := names(ents), []string{"a", "b.txt", "b", "b0", "c"}; !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if !ents[2].IsDir || !ents[4].IsDir || ents[3].IsDir {
		t.Fatalf("types: %+v", ents)
	}
	if _, ok := c.Entries(filepath.Join(dir, "missing")); ok {
		t.Fatal("a missing directory is ok")
	}
	if _, ok := c.Entries(filepath.Join(dir, "a")); ok {
		t.Fatal("a file is ok as a directory")
	}
}

// TestFreshness: a wide directory's index is reused while the directory
// is unchanged and trusted (the same slice comes back), and every change
// is seen: made right after the index was built (same timestamp tick),
// made once it is trusted, made and then hidden by restoring the mtime
// (cp -a, rsync -t), and dropped by Invalidate.
func TestFreshness(t *testing.T) {
	dir := t.TempDir()
	seed(t, dir, 2*minEntries)
	c := New(nil)
	ents, _ := c.Entries(dir)
	if err := os.WriteFile(filepath.Join(dir, "new-racy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ents, _ = c.Entries(dir); !slices.Contains(names(ents), "new-racy") {
		t.Fatal("a file added right after the index was built is missing")
	}
	waitTrusted(t, dir)
	first, _ := c.Entries(dir)
	again, _ := c.Entries(dir)
	if &first[0] != &again[0] {
		t.Fatal("an unchanged, trusted directory was read again")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "f00007")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dir, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	ents, _ = c.Entries(dir)
	if slices.Contains(names(ents), "f00007") || len(ents) != len(first)-1 {
		t.Fatalf("a removal hidden by restoring the mtime was missed (%d entries)", len(ents))
	}
	waitTrusted(t, dir)
	first, _ = c.Entries(dir)
	c.Invalidate(filepath.Dir(dir), dir)
	again, _ = c.Entries(dir)
	if &first[0] == &again[0] {
		t.Fatal("Invalidate kept the index")
	}
}

// TestBounded: small directories are not cached, and the cache holds at
// most maxDirs indexes.
func TestBounded(t *testing.T) {
	root := t.TempDir()
	c := New(nil)
	small := filepath.Join(root, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	seed(t, small, 3)
	if ents, ok := c.Entries(small); !ok || len(ents) != 3 {
		t.Fatalf("small: %d entries, ok %v", len(ents), ok)
	}
	for i := 0; i < maxDirs+3; i++ {
		d := filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		seed(t, d, minEntries)
		if ents, ok := c.Entries(d); !ok || len(ents) != minEntries {
			t.Fatalf("%s: %d entries, ok %v", d, len(ents), ok)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) != maxDirs || c.m[small] != nil {
		t.Fatalf("%d indexes cached (small one: %v), want %d", len(c.m), c.m[small] != nil, maxDirs)
	}
}
