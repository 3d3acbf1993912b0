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

// linkStore also resolves links.
type linkStore struct{ *fakeStore }

func (l linkStore) ResolveLink(ctx context.Context, oi *backends.ObjectInfo) error {
	t, ok := l.links["root/"+oi.Key]
	if !ok || t == "" {
		return backends.Wrap("readlink", oi.Key, backends.ErrNotExist, nil)
	}
	oi.Link, oi.Size, oi.Mode = t, int64(len(t)), 0o777
	return nil
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
