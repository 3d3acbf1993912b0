// Package nasroots is the administrator's list of the host directories that
// nas:// channels may name on a shared node, and whether as inputs only or
// as outputs too. A pod's volume attributes and a daemon client's mount
// request are untrusted: they may name only what this list allows. Nothing
// is allowed by default.
//
// Paths are resolved before they are checked: "..", "." and symbolic links
// (in the root and in the channel's path, as far as it exists) are
// followed, so "nas:///data/../etc/" or a link under an allowed root that
// points at /etc is judged by where it leads.
package nasroots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
)

// Root is one allowed host directory.
type Root struct {
	// Path is the directory, absolute and resolved (no symbolic links).
	Path string
	// Write lets output channels (and shared cache tiers, which the node
	// writes) use the directory; without it only inputs may.
	Write bool
}

// Policy is the list of allowed roots. The zero value allows nothing.
type Policy struct {
	roots []Root
}

// ErrNotAllowed is wrapped by every refusal of Check.
var ErrNotAllowed = errors.New("not an allowed nas root")

// Parse reads specs of the form PATH (input only), PATH:ro (the same) or
// PATH:rw (inputs and outputs). PATH must be absolute and not "/"; it need
// not exist yet, but if it exists its symbolic links are resolved now.
func Parse(specs []string) (Policy, error) {
	var p Policy
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		path, write := s, false
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			switch s[i+1:] {
			case "ro":
				path = s[:i]
			case "rw":
				path, write = s[:i], true
			default:
				return Policy{}, fmt.Errorf("nas root %q: want PATH, PATH:ro or PATH:rw", s)
			}
		}
		if !filepath.IsAbs(path) {
			return Policy{}, fmt.Errorf("nas root %q: want an absolute path", s)
		}
		res, err := Resolve(path)
		if err != nil {
			return Policy{}, fmt.Errorf("nas root %q: %w", s, err)
		}
		if res == "/" {
			return Policy{}, fmt.Errorf("nas root %q: the host's root directory cannot be allowed; name the directories pods may use", s)
		}
		p.roots = append(p.roots, Root{Path: res, Write: write})
	}
	return p, nil
}

// Roots returns the allowed roots.
func (p Policy) Roots() []Root { return append([]Root(nil), p.roots...) }

// String lists the roots as Parse reads them ("none" when empty).
func (p Policy) String() string {
	if len(p.roots) == 0 {
		return "none"
	}
	s := make([]string, len(p.roots))
	for i, r := range p.roots {
		s[i] = r.Path + ":ro"
		if r.Write {
			s[i] = r.Path + ":rw"
		}
	}
	return strings.Join(s, ",")
}

// Check refuses a nas:// URI that does not lie under an allowed root (or
// under a read-only root when write is set) and returns the URI with its
// path resolved: the caller mounts that, so a link changed after the check
// does not move the mount. Other schemes are returned unchanged: they name
// no host path.
func (p Policy) Check(u backends.URI, write bool) (backends.URI, error) {
	if u.Scheme != backends.SchemeNAS {
		return u, nil
	}
	res, err := Resolve(u.Path)
	if err != nil {
		return u, fmt.Errorf("%s: %w", u, err)
	}
	use := "input"
	if write {
		use = "output"
	}
	for _, r := range p.roots {
		if !within(res, r.Path) {
			continue
		}
		if write && !r.Write {
			return u, fmt.Errorf("%s: %w for outputs: %s is allowed read-only (an administrator allows writes with --nas-root %s:rw)", u, ErrNotAllowed, r.Path, r.Path)
		}
		out := u
		out.Path = res
		if u.IsDir() && !strings.HasSuffix(res, "/") {
			out.Path += "/"
		}
		return out, nil
	}
	return u, fmt.Errorf("%s (resolved to %s): %w for an %s; allowed: %s (an administrator sets them with --nas-root)", u, res, ErrNotAllowed, use, p)
}

// within reports whether path is root or lies under it.
func within(path, root string) bool {
	return path == root || strings.HasPrefix(path, strings.TrimSuffix(root, "/")+"/")
}

// Resolve returns the absolute path p with "..", "." and every symbolic
// link of its longest existing prefix resolved; the part that does not
// exist yet is appended as it is (after cleaning, so it holds no "..").
func Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; {
		res, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(res, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("resolve %s: %w", cur, err)
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			// cur exists but leads nowhere: a dangling link, whose
			// target could be made later, anywhere.
			return "", fmt.Errorf("resolve %s: a symbolic link to a path that does not exist", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", fmt.Errorf("resolve %s: %w", p, err)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
