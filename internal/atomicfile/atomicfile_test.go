package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestWriteReplaces(t *testing.T) {
	for _, s := range []Sync{NoSync, FileSync, Durable} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "state.json")
			for i, perm := range []os.FileMode{0o600, 0o644, 0o755} {
				want := []byte(fmt.Sprintf("content %d\n", i))
				if err := Write(p, want, perm, s); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("content %q, %v; want %q", got, err, want)
				}
				st, err := os.Stat(p)
				if err != nil || st.Mode().Perm() != perm {
					t.Fatalf("mode %v, %v; want %v (exactly, whatever the umask)", st.Mode().Perm(), err, perm)
				}
			}
			if names := entries(t, dir); len(names) != 1 {
				t.Errorf("left in the directory: %q", names)
			}
		})
	}
}

// TestFailureLeavesOldContent: whatever step fails, the target keeps its
// old content and no temporary file is left.
func TestFailureLeavesOldContent(t *testing.T) {
	errWrite := errors.New("producer failed")
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, p string) // makes the step fail
		write func(io.Writer) error
		want  error
	}{
		{"write fails", nil, func(w io.Writer) error {
			if _, err := w.Write([]byte("half of the new")); err != nil {
				return err
			}
			return errWrite
		}, errWrite},
		{"rename fails", func(t *testing.T, p string) {
			// A non-empty directory at the target: the rename is refused
			// after the temporary file is complete.
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			if c.setup != nil {
				c.setup(t, p)
			}
			write := c.write
			if write == nil {
				write = func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }
			}
			err := WriteFunc(p, 0o600, Durable, write)
			if err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("WriteFunc = %v, want %v", err, c.want)
			}
			if c.setup == nil {
				if got, err := os.ReadFile(p); err != nil || string(got) != "old" {
					t.Errorf("target %q, %v after a failure; want the old content", got, err)
				}
			}
			for _, n := range entries(t, dir) {
				if _, ok := TempTarget(n); ok {
					t.Errorf("temporary file %s left behind", n)
				}
			}
		})
	}
}

func TestMissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "f")
	if err := Write(p, []byte("x"), 0o600, NoSync); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write in a missing directory = %v, want ErrNotExist", err)
	}
}

// TestConcurrentWriters: writers of one path never share a temporary
// file; the target ends as one writer's complete content.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	contents := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		c := bytes.Repeat([]byte{byte('a' + i)}, 64<<10)
		contents[string(c)] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Write(p, c, 0o600, NoSync)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(p)
	if err != nil || !contents[string(got)] {
		t.Fatalf("target is no writer's content (%d bytes, %v)", len(got), err)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("left in the directory: %q", names)
	}
}

func TestTempTarget(t *testing.T) {
	dir := t.TempDir()
	// The name a write in progress has is recognised, with its target.
	var seen string
	err := WriteFunc(filepath.Join(dir, "ab12.meta"), 0o600, NoSync, func(w io.Writer) error {
		seen = filepath.Base(w.(*os.File).Name())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if target, ok := TempTarget(seen); !ok || target != "ab12.meta" {
		t.Errorf("TempTarget(%q) = %q, %v; want ab12.meta", seen, target, ok)
	}
	for _, n := range []string{"ab12.meta", ".ab12.tmp", "ab12.123.tmp", ".ab12.x1.tmp", "..tmp", ".ab12.123.json"} {
		if target, ok := TempTarget(n); ok {
			t.Errorf("TempTarget(%q) = %q, true; want false", n, target)
		}
	}
}
