package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// listing is a whole listing gathered over all its pages.
type listing struct {
	// files are the non-directory objects, in the order listed.
	files []backends.ObjectInfo
	// dirs are the directories, whether reported as IsDir objects or as
	// Prefixes (the contract lets the store choose), sorted.
	dirs []string
	// pages is the number of pages fetched.
	pages int
}

func (l listing) fileKeys() []string {
	keys := make([]string, len(l.files))
	for i, f := range l.files {
		keys[i] = f.Key
	}
	return keys
}

// listAll pages through a listing and checks every page against the
// contract: page size within MaxKeys, keys under the prefix with no trailing
// '/', Objects and Prefixes each strictly ascending across pages, nothing
// below a '/' in a non-recursive listing, no Prefixes in a recursive one, no
// directory reported twice, and a token that always moves on.
func listAll(t *testing.T, b backends.Backend, opt backends.ListOptions) listing {
	t.Helper()
	var (
		out        listing
		lastObj    string
		lastPre    string
		haveObj    bool
		havePre    bool
		dirSeen    = map[string]bool{}
		tokens     = map[string]bool{}
		emptyInRow int
	)
	what := fmt.Sprintf("List(prefix=%q recursive=%v maxKeys=%d)", opt.Prefix, opt.Recursive, opt.MaxKeys)
	for {
		page, err := b.List(t.Context(), opt)
		if err != nil {
			t.Fatalf("%s page %d (token %q): %v", what, out.pages+1, opt.Token, err)
		}
		out.pages++
		n := len(page.Objects) + len(page.Prefixes)
		if opt.MaxKeys > 0 && n > opt.MaxKeys {
			t.Fatalf("%s page %d: %d entries, more than MaxKeys", what, out.pages, n)
		}
		if opt.Recursive && len(page.Prefixes) > 0 {
			t.Fatalf("%s page %d: recursive listing returned Prefixes %q", what, out.pages, page.Prefixes)
		}
		for _, o := range page.Objects {
			checkListedKey(t, what, opt, o.Key)
			if haveObj && o.Key <= lastObj {
				t.Fatalf("%s: object %q listed after %q (not strictly ascending)", what, o.Key, lastObj)
			}
			lastObj, haveObj = o.Key, true
			if o.IsDir {
				if dirSeen[o.Key] {
					t.Fatalf("%s: directory %q reported twice", what, o.Key)
				}
				dirSeen[o.Key] = true
				out.dirs = append(out.dirs, o.Key)
				continue
			}
			if o.Version == "" {
				t.Errorf("%s: object %q has an empty Version", what, o.Key)
			}
			if o.ModTime.IsZero() {
				t.Errorf("%s: object %q has a zero ModTime", what, o.Key)
			}
			out.files = append(out.files, o)
		}
		for _, p := range page.Prefixes {
			checkListedKey(t, what, opt, p)
			if havePre && p <= lastPre {
				t.Fatalf("%s: prefix %q listed after %q (not strictly ascending)", what, p, lastPre)
			}
			lastPre, havePre = p, true
			if dirSeen[p] {
				t.Fatalf("%s: directory %q reported twice", what, p)
			}
			dirSeen[p] = true
			out.dirs = append(out.dirs, p)
		}
		if page.NextToken == "" {
			break
		}
		if tokens[page.NextToken] {
			t.Fatalf("%s: NextToken %q returned twice (listing would loop)", what, page.NextToken)
		}
		tokens[page.NextToken] = true
		if n == 0 {
			// An empty page with a token is tolerable once in a while
			// (a store may stop at a time limit), not as a habit.
			if emptyInRow++; emptyInRow > 3 {
				t.Fatalf("%s: more than 3 empty pages in a row", what)
			}
		} else {
			emptyInRow = 0
		}
		opt.Token = page.NextToken
	}
	slices.Sort(out.dirs)
	return out
}

func checkListedKey(t *testing.T, what string, opt backends.ListOptions, key string) {
	t.Helper()
	switch {
	case key == "":
		t.Fatalf("%s: empty key listed", what)
	case strings.HasSuffix(key, "/"):
		t.Fatalf("%s: key %q ends in '/'", what, key)
	case !strings.HasPrefix(key, opt.Prefix):
		t.Fatalf("%s: key %q outside the prefix", what, key)
	case !opt.Recursive && strings.Contains(key[len(opt.Prefix):], "/"):
		t.Fatalf("%s: key %q lies below a '/' in a non-recursive listing", what, key)
	}
}

// wantKeys compares two key lists, reporting the first difference.
func wantKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string = "<none>", "<none>"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("%s: %d keys, want %d; first difference at #%d: %q, want %q", what, len(got), len(want), i, g, w)
			return
		}
	}
}

// wantRecursiveDirs checks that directories in a recursive listing (allowed,
// not required) are real ancestors of listed files or known directories.
func wantRecursiveDirs(t *testing.T, what string, l listing, known ...string) {
	t.Helper()
	ok := map[string]bool{}
	for _, k := range known {
		ok[k] = true
	}
	for _, f := range l.files {
		for k := f.Key; strings.Contains(k, "/"); {
			k = k[:strings.LastIndexByte(k, '/')]
			ok[k] = true
		}
	}
	for _, d := range l.dirs {
		if !ok[d] {
			t.Errorf("%s: directory %q listed, but no such directory was made", what, d)
		}
	}
}

// testListDelimiter: a non-recursive listing stops at '/', showing each
// sub-directory once (as an IsDir object or a prefix) and the files of
// this level only; a recursive one shows every file below.
func testListDelimiter(t *testing.T, s *suite) {
	b := s.open(t)
	keys := []string{"a", "b/x", "b/y/z", "b0", "c/d/e/f", "b.txt", "b/y.txt"}
	for _, k := range keys {
		put(t, b, k, []byte(k))
	}
	slices.Sort(keys)

	root := listAll(t, b, backends.ListOptions{})
	wantKeys(t, "files at the root", root.fileKeys(), []string{"a", "b.txt", "b0"})
	wantKeys(t, "directories at the root", root.dirs, []string{"b", "c"})
	for _, f := range root.files {
		if f.Size != int64(len(f.Key)) {
			t.Errorf("listed size of %q = %d, want %d", f.Key, f.Size, len(f.Key))
		}
	}

	sub := listAll(t, b, backends.ListOptions{Prefix: "b/"})
	wantKeys(t, "files in b/", sub.fileKeys(), []string{"b/x", "b/y.txt"})
	wantKeys(t, "directories in b/", sub.dirs, []string{"b/y"})

	deep := listAll(t, b, backends.ListOptions{Prefix: "c/d/"})
	wantKeys(t, "files in c/d/", deep.fileKeys(), nil)
	wantKeys(t, "directories in c/d/", deep.dirs, []string{"c/d/e"})

	all := listAll(t, b, backends.ListOptions{Recursive: true})
	wantKeys(t, "recursive listing", all.fileKeys(), keys)
	wantRecursiveDirs(t, "recursive listing", all)

	allB := listAll(t, b, backends.ListOptions{Prefix: "b/", Recursive: true})
	wantKeys(t, "recursive listing of b/", allB.fileKeys(), []string{"b/x", "b/y.txt", "b/y/z"})
	wantRecursiveDirs(t, "recursive listing of b/", allB)

	for _, p := range []string{"nothing/", "nothing", "a/", "b/x/"} {
		for _, rec := range []bool{false, true} {
			l := listAll(t, b, backends.ListOptions{Prefix: p, Recursive: rec})
			if len(l.files)+len(l.dirs) != 0 {
				t.Errorf("List(prefix=%q recursive=%v) = files %q dirs %q, want nothing", p, rec, l.fileKeys(), l.dirs)
			}
		}
	}
}

// testListPrefixPartial: a prefix that ends inside a name matches files and
// directories that start with it, at that level only unless recursive.
func testListPrefixPartial(t *testing.T, s *suite) {
	b := s.open(t)
	for _, k := range []string{"ab", "abc/x", "abd", "ac", "d/ab1", "d/ab2/x", "d/b"} {
		put(t, b, k, []byte(k))
	}
	l := listAll(t, b, backends.ListOptions{Prefix: "ab"})
	wantKeys(t, "files with prefix ab", l.fileKeys(), []string{"ab", "abd"})
	wantKeys(t, "directories with prefix ab", l.dirs, []string{"abc"})

	l = listAll(t, b, backends.ListOptions{Prefix: "ab", Recursive: true})
	wantKeys(t, "files with prefix ab, recursive", l.fileKeys(), []string{"ab", "abc/x", "abd"})
	wantRecursiveDirs(t, "recursive listing with prefix ab", l)

	l = listAll(t, b, backends.ListOptions{Prefix: "d/ab"})
	wantKeys(t, "files with prefix d/ab", l.fileKeys(), []string{"d/ab1"})
	wantKeys(t, "directories with prefix d/ab", l.dirs, []string{"d/ab2"})

	l = listAll(t, b, backends.ListOptions{Prefix: "d/ab", Recursive: true})
	wantKeys(t, "files with prefix d/ab, recursive", l.fileKeys(), []string{"d/ab1", "d/ab2/x"})
}

// testListSmallPages: tiny pages mixing files and directories still yield
// every entry exactly once, whichever kind ends a page.
func testListSmallPages(t *testing.T, s *suite) {
	b := s.open(t)
	keys := []string{"a", "b/x", "c", "d/y", "d/z", "e", "f/g/h", "g"}
	for _, k := range keys {
		put(t, b, k, []byte(k))
	}
	for _, max := range []int{1, 2, 3, 5} {
		l := listAll(t, b, backends.ListOptions{MaxKeys: max})
		wantKeys(t, fmt.Sprintf("files with MaxKeys=%d", max), l.fileKeys(), []string{"a", "c", "e", "g"})
		wantKeys(t, fmt.Sprintf("directories with MaxKeys=%d", max), l.dirs, []string{"b", "d", "f"})
		if max == 1 && l.pages < 7 {
			t.Errorf("MaxKeys=1: %d pages for 7 entries", l.pages)
		}
		r := listAll(t, b, backends.ListOptions{MaxKeys: max, Recursive: true})
		wantKeys(t, fmt.Sprintf("recursive files with MaxKeys=%d", max), r.fileKeys(), keys)
	}
}

// testListStartAfter: a listing that starts after a key returns exactly
// the files whose keys sort after it (byte order), with pages and tokens
// working as in a listing from the start; a directory is listed when both
// places a store may sort it at (its key, its key and '/') lie after the
// key, and not when both lie at or before it.
func testListStartAfter(t *testing.T, s *suite) {
	b := s.open(t)
	files := []string{
		"a", "a b", "a+c", "a-b", "a.c", "a0", "a00", "a1", "a9", "aa", "b", "b%2F", "b0",
		"d/x", "d-", "d.txt", "e/f/g", "img_000999.jpg", "img_001", "img_001000.jpg", "img_00100", "z",
		"é", "éa", "日本", "日本語", "🙂", "p/k1", "p/k2", "p/k2x", "p/k3", "p/q/r",
	}
	for _, k := range files {
		put(t, b, k, []byte(k))
	}
	slices.Sort(files)
	dirs := map[string][]string{"": {"d", "e", "p"}, "p/": {"p/q"}}
	afters := []string{"", " ", "a", "a ", "a-", "a0", "a09", "a1", "aZ", "b%", "d", "d-", "d.", "d/", "d/x", "d0",
		"img_000999.jpg", "img_001", "img_0010", "img_001000.jpg", "img_001000.jpg0", "img_0011", "y",
		"é", "éa", "日", "日本", "日本語a", "🙂", "\U0010FFFF", "p/", "p/k1", "p/k2", "p/k2w", "p/k4", "p/q", "p/q/r"}
	for _, prefix := range []string{"", "p/"} {
		for _, rec := range []bool{false, true} {
			for _, after := range afters {
				for _, max := range []int{0, 2} {
					opt := backends.ListOptions{Prefix: prefix, Recursive: rec, StartAfter: after, MaxKeys: max}
					what := fmt.Sprintf("List(prefix=%q recursive=%v startAfter=%q maxKeys=%d)", prefix, rec, after, max)
					l := listAll(t, b, opt)
					var want []string
					for _, f := range files {
						if strings.HasPrefix(f, prefix) && f > after && (rec || !strings.Contains(f[len(prefix):], "/")) {
							want = append(want, f)
						}
					}
					wantKeys(t, what, l.fileKeys(), want)
					if rec {
						wantRecursiveDirs(t, what, l)
						continue
					}
					got := map[string]bool{}
					for _, d := range l.dirs {
						got[d] = true
					}
					for _, d := range dirs[prefix] {
						switch {
						case d > after && !got[d]:
							t.Errorf("%s: directory %q not listed", what, d)
						case d+"/" <= after && got[d]:
							t.Errorf("%s: directory %q listed, but it sorts before the start", what, d)
						}
					}
				}
			}
		}
	}
}

// testLookupEntry: backends.LookupEntry describes every name as the
// listing of its directory does (a directory among names that sort between
// it and its '/', a file, a deep directory), and a missing name as missing.
func testLookupEntry(t *testing.T, s *suite) {
	b := s.open(t)
	for _, k := range []string{"a", "b/x", "b/y/z", "b0", "b.txt", "b-1", "c/d/e/f"} {
		put(t, b, k, []byte(k))
	}
	ctx := context.Background()
	for _, dir := range []string{"", "b/", "b/y/", "c/", "c/d/"} {
		l := listAll(t, b, backends.ListOptions{Prefix: dir})
		for _, f := range l.files {
			got, err := backends.LookupEntry(ctx, b, f.Key)
			if err != nil || got.IsDir || got.Key != f.Key || got.Size != f.Size || got.Version != f.Version {
				t.Errorf("LookupEntry(%q) = %+v, %v; want the listed file %+v", f.Key, got, err, f)
			}
		}
		for _, d := range l.dirs {
			got, err := backends.LookupEntry(ctx, b, d)
			if err != nil || !got.IsDir || got.Key != d {
				t.Errorf("LookupEntry(%q) = %+v, %v; want the listed directory", d, got, err)
			}
		}
	}
	for _, k := range []string{"nope", "b/q", "c/d/e/g", "b/y/q", "c/d/e/f0"} {
		if got, err := backends.LookupEntry(ctx, b, k); !errors.Is(err, backends.ErrNotExist) {
			t.Errorf("LookupEntry(%q) of a missing name = %+v, %v; want ErrNotExist", k, got, err)
		}
	}
}
