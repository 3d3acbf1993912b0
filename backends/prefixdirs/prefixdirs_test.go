package prefixdirs

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

var (
	errMissing   = errors.New("404")
	errTruncated = errors.New("truncated")
	errDown      = errors.New("503")
)

// fakeStore is a flat store: names to sizes, listed in name order, folded
// at the delimiter, paged with the name to continue from as the token.
type fakeStore struct {
	names map[string]int64
	links map[string]string
	// noToken: truncated pages come without a token.
	noToken bool
	// down: every call fails.
	down bool
}

func (f *fakeStore) Head(ctx context.Context, key string) (backends.ObjectInfo, error) {
	if f.down {
		return backends.ObjectInfo{}, errDown
	}
	size, ok := f.names["root/"+key]
	if !ok {
		return backends.ObjectInfo{}, errMissing
	}
	return backends.ObjectInfo{Key: key, Size: size, Version: "e", Mode: 0o644}, nil
}

func (f *fakeStore) NotFound(err error) bool { return errors.Is(err, errMissing) }

func (f *fakeStore) Wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errTruncated) {
		return backends.Wrap(op, key, backends.ErrTransient, err)
	}
	return backends.Wrap(op, key, nil, err)
}

func (f *fakeStore) ListPage(ctx context.Context, prefix, delim, token, startAfter string, max int) (Page, error) {
	if f.down {
		return Page{}, errDown
	}
	var names []string
	for n := range f.names {
		names = append(names, n)
	}
	sort.Strings(names)
	after := startAfter
	if token != "" {
		after = token
	}
	var page Page
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || n <= after {
			continue
		}
		if len(page.Entries)+len(page.Prefixes) == max {
			page.Truncated = true
			if !f.noToken {
				page.NextToken = after
			}
			break
		}
		if delim != "" {
			if i := strings.Index(n[len(prefix):], delim); i >= 0 {
				p := n[:len(prefix)+i+1]
				if !slices.Contains(page.Prefixes, p) {
					page.Prefixes = append(page.Prefixes, p)
				}
				after = p + "\xff"
				continue
			}
		}
		_, link := f.links[n]
		page.Entries = append(page.Entries, Entry{Name: n, Size: f.names[n], ETag: "e", Link: link})
		after = n
	}
	return page, nil
}

func (f *fakeStore) Delete(ctx context.Context, name string) error {
	if f.down {
		return errDown
	}
	delete(f.names, name)
	delete(f.links, name)
	return nil
}

func (f *fakeStore) PutMarker(ctx context.Context, name string) error {
	if f.down {
		return errDown
	}
	f.names[name] = 0
	return nil
}

// linkStore also reads links, which (as OSS's HEAD does) Head follows:
// a dangling link reads as missing.
type linkStore struct{ *fakeStore }

func (l linkStore) Head(ctx context.Context, key string) (backends.ObjectInfo, error) {
	if t, ok := l.links["root/"+key]; ok {
		if _, ok := l.names["root/"+t]; !ok {
			return backends.ObjectInfo{}, errMissing
		}
	}
	return l.fakeStore.Head(ctx, key)
}

func (l linkStore) ReadLink(ctx context.Context, key string) (string, error) {
	t, ok := l.links["root/"+key]
	if !ok || t == "" {
		return "", backends.Wrap("readlink", key, backends.ErrNotExist, nil)
	}
	return t, nil
}

func newStore() *fakeStore {
	return &fakeStore{names: map[string]int64{
		"other/x":       1,
		"root/a":        1,
		"root/d/":       0, // a marker
		"root/d/f":      3,
		"root/d/sub/g":  4,
		"root/e/deep/h": 5, // a directory with no marker
		"root/l":        9,
		"root/gone":     9,
	}, links: map[string]string{"root/l": "a", "root/gone": ""}}
}

func ns(s Store) Namespace {
	return Namespace{Store: s, Prefix: "root/", PageSize: 2, Truncated: errTruncated}
}

// TestStat: objects, directories with and without markers, the root,
// missing keys, and store errors.
func TestStat(t *testing.T) {
	n := ns(newStore())
	for key, want := range map[string]backends.ObjectInfo{
		"":     {IsDir: true, Mode: 0o755},
		"a":    {Key: "a", Size: 1, Version: "e", Mode: 0o644},
		"d":    {Key: "d", IsDir: true, Mode: 0o755},
		"d/":   {Key: "d", IsDir: true, Mode: 0o755},
		"e":    {Key: "e", IsDir: true, Mode: 0o755},
		"e/de": {},
		"x":    {},
	} {
		got, err := n.Stat(t.Context(), key)
		if want == (backends.ObjectInfo{}) {
			if !errors.Is(err, backends.ErrNotExist) {
				t.Errorf("Stat(%q) = %+v, %v; want ErrNotExist", key, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("Stat(%q) = %+v, %v; want %+v", key, got, err, want)
		}
	}
	down := newStore()
	down.down = true
	var oe *backends.OpError
	if _, err := ns(down).Stat(t.Context(), "a"); !errors.Is(err, errDown) || !errors.As(err, &oe) || oe.Op != "stat" {
		t.Errorf("Stat with the store down = %v", err)
	}
}

// listAll pages through a listing.
func listAll(t *testing.T, n Namespace, opt backends.ListOptions) (objects, prefixes []string) {
	t.Helper()
	for pages := 0; ; pages++ {
		page, err := n.List(t.Context(), opt)
		if err != nil {
			t.Fatalf("List(%+v): %v", opt, err)
		}
		for _, o := range page.Objects {
			s := o.Key
			if o.IsDir {
				s += "/"
			}
			if o.Link != "" {
				s += "->" + o.Link
			}
			objects = append(objects, s)
		}
		prefixes = append(prefixes, page.Prefixes...)
		if page.NextToken == "" {
			return objects, prefixes
		}
		if pages > 100 {
			t.Fatal("listing does not end")
		}
		opt.Token = page.NextToken
	}
}

// TestList: one level folds sub-directories into prefixes and skips the
// listed directory's marker; a recursive listing shows markers as
// directories; names come back relative to the root; links are resolved
// when asked for, and dropped if gone; a truncated page without a token
// is an error, not a short listing.
func TestList(t *testing.T) {
	st := newStore()
	n := ns(linkStore{st})
	for _, c := range []struct {
		opt               backends.ListOptions
		objects, prefixes []string
	}{
		{backends.ListOptions{}, []string{"a", "gone", "l"}, []string{"d", "e"}},
		{backends.ListOptions{Prefix: "d/"}, []string{"d/f"}, []string{"d/sub"}},
		{backends.ListOptions{Recursive: true}, []string{"a", "d/", "d/f", "d/sub/g", "e/deep/h", "gone", "l"}, nil},
		{backends.ListOptions{Links: true}, []string{"a", "l->a"}, []string{"d", "e"}},
		{backends.ListOptions{Recursive: true, StartAfter: "d/sub/g", MaxKeys: 1}, []string{"e/deep/h", "gone", "l"}, nil},
	} {
		objects, prefixes := listAll(t, n, c.opt)
		if !slices.Equal(objects, c.objects) || !slices.Equal(prefixes, c.prefixes) {
			t.Errorf("List(%+v) = %q, %q; want %q, %q", c.opt, objects, prefixes, c.objects, c.prefixes)
		}
	}
	st.noToken = true
	if _, err := n.List(t.Context(), backends.ListOptions{Recursive: true}); !errors.Is(err, backends.ErrTransient) || !errors.Is(err, errTruncated) {
		t.Errorf("a truncated page without a token = %v, want a transient error", err)
	}
}

// TestDelete: an object, an empty directory (its marker), a dangling link;
// not a directory with children, nor a missing key, nor the root.
func TestDelete(t *testing.T) {
	st := newStore()
	st.names["root/dangling"] = 1
	st.links["root/dangling"] = "nowhere"
	n := ns(linkStore{st})
	ctx := t.Context()
	for key, want := range map[string]error{
		"":         backends.ErrInvalid,
		"/":        backends.ErrInvalid,
		"missing":  backends.ErrNotExist,
		"missing/": backends.ErrNotExist,
		"d":        backends.ErrNotEmpty,
		"e":        backends.ErrNotEmpty,
	} {
		if err := n.Delete(ctx, key); !errors.Is(err, want) {
			t.Errorf("Delete(%q) = %v, want %v", key, err, want)
		}
	}
	for _, key := range []string{"a", "dangling", "d/f", "d/sub/g", "d"} {
		before := len(st.names)
		if err := n.Delete(ctx, key); err != nil || len(st.names) != before-1 {
			t.Errorf("Delete(%q) = %v, removed %d names", key, err, before-len(st.names))
		}
	}
	if _, ok := st.names["root/d/"]; ok {
		t.Error("the marker of a deleted directory stays")
	}
	st.down = true
	if err := n.Delete(ctx, "a"); !errors.Is(err, errDown) {
		t.Errorf("Delete with the store down = %v", err)
	}
}

// TestMakeDir: markers for the directory and every parent; an object of
// that name refuses.
func TestMakeDir(t *testing.T) {
	st := newStore()
	n := ns(st)
	if err := n.MakeDir(t.Context(), "x/y/z/"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"root/x/", "root/x/y/", "root/x/y/z/"} {
		if _, ok := st.names[m]; !ok {
			t.Errorf("no marker %q", m)
		}
	}
	if err := n.MakeDir(t.Context(), "a"); !errors.Is(err, backends.ErrExist) {
		t.Errorf("MakeDir over an object = %v, want ErrExist", err)
	}
	if err := n.MakeDir(t.Context(), ""); err != nil {
		t.Errorf("MakeDir of the root = %v", err)
	}
	st.down = true
	if err := n.MakeDir(t.Context(), "q"); !errors.Is(err, errDown) {
		t.Errorf("MakeDir with the store down = %v", err)
	}
}

// countingStore counts the store's calls.
type countingStore struct {
	*fakeStore
	calls int
}

func (c *countingStore) Head(ctx context.Context, key string) (backends.ObjectInfo, error) {
	c.calls++
	return c.fakeStore.Head(ctx, key)
}

func (c *countingStore) ListPage(ctx context.Context, prefix, delim, token, startAfter string, max int) (Page, error) {
	c.calls++
	return c.fakeStore.ListPage(ctx, prefix, delim, token, startAfter, max)
}

// TestLookupEntry: a name is described as the listing of its directory
// shows it (a directory wins over an object of the same name), present or
// missing, in one call, and in two only when names sorting between key and
// key/ fill the first page.
func TestLookupEntry(t *testing.T) {
	s := newStore()
	s.names["root/both"] = 7
	s.names["root/both/x"] = 1
	s.names["root/busy"] = 2
	s.names["root/busy-1"] = 3
	s.names["root/busy.txt"] = 4
	s.names["root/busy/y"] = 5
	s.names["root/file"] = 6
	s.names["root/file.bak"] = 6
	s.names["root/file.old"] = 6
	for _, tc := range []struct {
		key   string
		want  backends.ObjectInfo
		err   error
		calls int
	}{
		{key: "a", want: backends.ObjectInfo{Key: "a", Size: 1, Version: "e", Mode: 0o644}, calls: 1},
		{key: "d", want: backends.ObjectInfo{Key: "d", IsDir: true, Mode: 0o755}, calls: 1},
		{key: "e", want: backends.ObjectInfo{Key: "e", IsDir: true, Mode: 0o755}, calls: 1},
		{key: "d/f", want: backends.ObjectInfo{Key: "d/f", Size: 3, Version: "e", Mode: 0o644}, calls: 1},
		{key: "both", want: backends.ObjectInfo{Key: "both", IsDir: true, Mode: 0o755}, calls: 1},
		{key: "busy", want: backends.ObjectInfo{Key: "busy", IsDir: true, Mode: 0o755}, calls: 2},
		{key: "file", want: backends.ObjectInfo{Key: "file", Size: 6, Version: "e", Mode: 0o644}, calls: 2},
		{key: "missing", err: backends.ErrNotExist, calls: 1},
		{key: "d/missing", err: backends.ErrNotExist, calls: 1},
		{key: "", want: backends.ObjectInfo{IsDir: true, Mode: 0o755}, calls: 0},
	} {
		c := &countingStore{fakeStore: s}
		got, err := ns(c).LookupEntry(context.Background(), tc.key)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("LookupEntry(%q) = %+v, %v; want %v", tc.key, got, err, tc.err)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("LookupEntry(%q) = %+v, %v; want %+v", tc.key, got, err, tc.want)
		}
		if c.calls != tc.calls {
			t.Errorf("LookupEntry(%q) made %d store calls, want %d", tc.key, c.calls, tc.calls)
		}
	}
	s.down = true
	if _, err := ns(s).LookupEntry(context.Background(), "a"); err == nil || errors.Is(err, backends.ErrNotExist) {
		t.Errorf("LookupEntry on a failing store = %v, want the store's error", err)
	}
}
