package nasroots

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

func uri(t *testing.T, s string) backends.URI {
	t.Helper()
	u, err := backends.ParseURI(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestCheck: a nas:// URI passes only under an allowed root, outputs only
// under a read-write one; "..", links out of a root and dangling links are
// judged by where they lead; the zero policy allows nothing.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	data, out, secret := filepath.Join(dir, "data"), filepath.Join(dir, "out"), filepath.Join(dir, "secret")
	for _, d := range []string{data, out, secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(data, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "later"), filepath.Join(out, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(data, filepath.Join(dir, "datalink")); err != nil {
		t.Fatal(err)
	}
	p, err := Parse([]string{filepath.Join(dir, "datalink"), out + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != data+":ro,"+out+":rw" {
		t.Errorf("policy %s: the root given through a link was not resolved", got)
	}
	for _, c := range []struct {
		uri   string
		write bool
		want  string // resolved path; "" for a refusal
	}{
		{"nas://" + data + "/", false, data + "/"},
		{"nas://" + data + "/sub/x.bin", false, data + "/sub/x.bin"},
		{"file://" + out + "/new/", true, out + "/new/"},
		{"nas://" + out + "/", false, out + "/"},
		{"nas://" + data + "/", true, ""},            // read-only root
		{"nas://" + data + "/../secret/", false, ""}, // ..
		{"nas://" + data + "/escape/", false, ""},    // a link out of the root
		{"nas://" + out + "/dangling/", true, ""},    // a link to nowhere (yet)
		{"nas://" + dir + "/", false, ""},            // the parent of the roots
		{"nas://" + data + "x/", false, ""},          // a sibling sharing the prefix
		{"nas:///etc/", false, ""},
	} {
		u, perr := backends.ParseURI(c.uri)
		if perr != nil {
			// ParseURI refuses ".."; Check must too, given such a URI.
			_, rest, _ := strings.Cut(c.uri, "://")
			u = backends.URI{Scheme: backends.SchemeNAS, Path: rest}
		}
		got, err := p.Check(u, c.write)
		if c.want == "" {
			if err == nil {
				t.Errorf("%s (write %v): allowed as %s", c.uri, c.write, got)
			}
			continue
		}
		if err != nil || got.Path != c.want {
			t.Errorf("%s (write %v): %v, %v; want %s", c.uri, c.write, got.Path, err, c.want)
		}
	}
	_, err = Policy{}.Check(uri(t, "nas://"+data+"/"), false)
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--nas-root") {
		t.Errorf("the zero policy: %v, want a refusal naming --nas-root", err)
	}
	if u, err := (Policy{}).Check(uri(t, "oss://bkt/x/"), true); err != nil || u.String() != "oss://bkt/x/" {
		t.Errorf("an oss URI: %v, %v", u, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"relative/dir", "/", "/data:rx", "/..:rw"} {
		if _, err := Parse([]string{s}); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}
