package backendtest

import (
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// linksIn lists prefix (non-recursively, asking for links) and returns
// the link targets and the keys of the regular files by key.
func linksIn(t *testing.T, b backends.Backend, prefix string) (links map[string]string, files []string) {
	t.Helper()
	l := listAll(t, b, backends.ListOptions{Prefix: prefix, Links: true})
	links = map[string]string{}
	for _, o := range l.files {
		if o.Link != "" {
			if o.IsDir || o.Size != int64(len(o.Link)) {
				t.Errorf("link %q listed as %+v; want IsDir false, Size %d", o.Key, o, len(o.Link))
			}
			links[o.Key] = o.Link
		} else {
			files = append(files, o.Key)
		}
	}
	return links, files
}

// testLinker: a link keeps its target verbatim (dangling, absolute, "..",
// to a directory), lists as a link only when asked, never collides with a
// regular name (in particular the old "NAME.mlfsdlink" encoding: a file of
// that name stays a file, and a link "q" and a file "q.mlfsdlink" live side
// by side), refuses an existing key, and deletes (and renames, with
// Renamer) as itself, leaving its target alone.
func testLinker(t *testing.T, s *suite) {
	b := s.open(t)
	ln := requireOptional[backends.Linker](t, b, s.opt.RequireLinker, "Linker")
	ctx := t.Context()
	put(t, b, "d/file", []byte("target data"))
	put(t, b, "x.mlfsdlink", []byte("not a link"))
	put(t, b, "q.mlfsdlink", []byte("file beside link q"))
	targets := map[string]string{
		"q":           "d/file",
		"dangling":    "no/such/thing",
		"abs":         "/etc/passwd",
		"up":          "../../outside",
		"todir":       "d",
		"sp":          "a b+c%20d?e#f",
		"d/sub/inner": "../file",
	}
	for k, target := range targets {
		if err := ln.Symlink(ctx, k, target); err != nil {
			t.Fatalf("Symlink(%q, %q): %v", k, target, err)
		}
	}
	links, files := linksIn(t, b, "")
	wantKeys(t, "regular files at the root (listing links)", files, []string{"q.mlfsdlink", "x.mlfsdlink"})
	for k, target := range targets {
		if k == "d/sub/inner" {
			continue
		}
		if links[k] != target {
			t.Errorf("listed link %q -> %q, want -> %q", k, links[k], target)
		}
	}
	if len(links) != len(targets)-1 {
		t.Errorf("links at the root: %q, want %d", links, len(targets)-1)
	}
	wantContent(t, b, "x.mlfsdlink", []byte("not a link"))
	wantContent(t, b, "q.mlfsdlink", []byte("file beside link q"))
	links, _ = linksIn(t, b, "d/sub/")
	if links["d/sub/inner"] != "../file" {
		t.Errorf("link in a made directory: %q", links)
	}
	// Recursive listings do not descend through a link to a directory.
	l := listAll(t, b, backends.ListOptions{Recursive: true, Links: true})
	for _, o := range l.files {
		if o.Key == "todir/file" {
			t.Errorf("recursive listing went through link todir: %+v", o)
		}
	}

	wantErr(t, "Symlink over a link", ln.Symlink(ctx, "q", "elsewhere"), backends.ErrExist)
	wantErr(t, "Symlink over a file", ln.Symlink(ctx, "x.mlfsdlink", "elsewhere"), backends.ErrExist)
	wantErr(t, "Symlink over a dangling link", ln.Symlink(ctx, "dangling", "elsewhere"), backends.ErrExist)
	wantContent(t, b, "x.mlfsdlink", []byte("not a link"))
	if links, _ := linksIn(t, b, ""); links["q"] != "d/file" || links["dangling"] != "no/such/thing" {
		t.Errorf("after refused Symlinks: %q", links)
	}

	for _, k := range []string{"q", "dangling", "todir"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(link %q): %v", k, err)
		}
	}
	wantContent(t, b, "d/file", []byte("target data"))
	wantContent(t, b, "q.mlfsdlink", []byte("file beside link q"))
	links, files = linksIn(t, b, "")
	if _, ok := links["q"]; ok || links["abs"] != "/etc/passwd" {
		t.Errorf("links after Delete: %q", links)
	}
	wantKeys(t, "regular files after deleting links", files, []string{"q.mlfsdlink", "x.mlfsdlink"})
	wantErr(t, "Delete of a deleted link", b.Delete(ctx, "dangling"), backends.ErrNotExist)

	if rn, ok := backends.As[backends.Renamer](b); ok {
		if err := rn.Rename(ctx, "up", "d/moved"); err != nil {
			t.Fatalf("Rename of a link: %v", err)
		}
		links, _ = linksIn(t, b, "d/")
		if links["d/moved"] != "../../outside" {
			t.Errorf("renamed link: %q", links)
		}
	}
}
