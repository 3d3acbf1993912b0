package backendtest_test

import (
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
	"github.com/mlfsd/mlfsd/backends/nas"
)

// The suite is only worth its name if it fails broken backends. Each
// mutant below wraps the (conforming) NAS backend and breaks one rule of
// the contract; TestSuiteCatchesMutants runs the named sub-test against it
// in a child process and expects that sub-test to fail.
var mutants = map[string]struct {
	wrap func(backends.Backend) backends.Backend
	// catches are sub-tests of the suite expected to fail on this mutant.
	catches []string
}{
	"read-ignores-offset": {
		func(b backends.Backend) backends.Backend { return &readFromStart{b} },
		[]string{"RangedRead", "ConcurrentReaders", "LargeStreamingWrite"},
	},
	"read-ignores-length": {
		func(b backends.Backend) backends.Backend { return &readToEnd{b} },
		[]string{"RangedRead", "ConcurrentReaders"},
	},
	"constant-version": {
		func(b backends.Backend) backends.Backend { return &constVersion{b} },
		[]string{"OverwriteChangesVersion", "ReadIfVersion"},
	},
	"delete-missing-ok": {
		func(b backends.Backend) backends.Backend { return &deleteMissingOK{b} },
		[]string{"EmptyRoot", "Delete"},
	},
	"drops-page-ends": {
		func(b backends.Backend) backends.Backend { return &dropPageEnd{b} },
		[]string{"ListSmallPages", "ListManyKeys"},
	},
	"unsorted-pages": {
		func(b backends.Backend) backends.Backend { return &reversePage{b} },
		[]string{"ListDelimiter", "KeyNames"},
	},
	"ignores-start-after": {
		func(b backends.Backend) backends.Backend { return &ignoreStartAfter{b} },
		[]string{"ListStartAfter"},
	},
	"visible-before-commit": {
		func(b backends.Backend) backends.Backend { return &eagerWrite{b} },
		[]string{"WriteInvisibleUntilCommit", "Abort"},
	},
	"corrupts-large-writes": {
		func(b backends.Backend) backends.Backend { return &corruptWrite{b} },
		[]string{"LargeStreamingWrite"},
	},
	"ignores-cancel": {
		func(b backends.Backend) backends.Backend { return &ignoreCancel{b} },
		[]string{"ContextCanceled"},
	},
	"racy-exclusive-write": {
		func(b backends.Backend) backends.Backend { return &racyExclusive{b} },
		[]string{"ExclusiveWriter"},
	},
	"suffix-encoded-links": {
		func(b backends.Backend) backends.Backend { return &suffixLinks{b} },
		[]string{"Linker"},
	},
}

const mutantEnv = "BACKENDTEST_MUTANT"

func newNAS(t *testing.T) backends.Backend {
	u, err := backends.ParseURI((&url.URL{Scheme: "nas", Path: t.TempDir() + "/"}).String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := nas.New(t.Context(), u, nas.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMutantChild runs the suite on the mutant named in the environment; it
// is the child half of TestSuiteCatchesMutants and does nothing on its own.
func TestMutantChild(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("child process of TestSuiteCatchesMutants")
	}
	m := mutants[name]
	backendtest.RunOptions(t, func(t *testing.T) backends.Backend { return m.wrap(newNAS(t)) },
		backendtest.Options{ManyKeys: 3000, LargeSize: 20<<20 + 3, ExclusiveWriter: true})
}

func TestSuiteCatchesMutants(t *testing.T) {
	names := make([]string, 0, len(mutants))
	for n := range mutants {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, sub := range mutants[name].catches {
				cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestMutantChild$/^"+sub+"$", "-test.v")
				cmd.Env = append(os.Environ(), mutantEnv+"="+name)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Errorf("sub-test %s passed on mutant %s:\n%s", sub, name, out)
					continue
				}
				if !strings.Contains(string(out), "--- FAIL: TestMutantChild/"+sub) {
					t.Errorf("mutant %s: sub-test %s did not report a failure:\n%s", name, sub, out)
				}
			}
		})
	}
}

// TestSuiteOnConformingBackend runs the same reduced suite on the unbroken
// backend, so a mutant's failure is known to come from its breakage.
func TestSuiteOnConformingBackend(t *testing.T) {
	backendtest.RunOptions(t, newNAS, backendtest.Options{ManyKeys: 3000, LargeSize: 20<<20 + 3, ExclusiveWriter: true})
}

type readFromStart struct{ backends.Backend }

func (m *readFromStart) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	if opt.Length >= 0 {
		opt.Length += opt.Offset
	}
	opt.Offset = 0
	return m.Backend.Read(ctx, key, opt)
}

type readToEnd struct{ backends.Backend }

func (m *readToEnd) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	opt.Length = -1
	return m.Backend.Read(ctx, key, opt)
}

type constVersion struct{ backends.Backend }

func (m *constVersion) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	oi, err := m.Backend.Stat(ctx, key)
	oi.Version = "v1"
	return oi, err
}

func (m *constVersion) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	opt.IfVersion = ""
	return m.Backend.Read(ctx, key, opt)
}

func (m *constVersion) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	w, err := m.Backend.Write(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &constVersionWriter{w}, nil
}

type constVersionWriter struct{ backends.Writer }

func (w *constVersionWriter) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	oi, err := w.Writer.Commit(ctx)
	oi.Version = "v1"
	return oi, err
}

type deleteMissingOK struct{ backends.Backend }

func (m *deleteMissingOK) Delete(ctx context.Context, key string) error {
	if _, err := m.Backend.Stat(ctx, key); err != nil {
		return nil
	}
	return m.Backend.Delete(ctx, key)
}

type dropPageEnd struct{ backends.Backend }

func (m *dropPageEnd) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	p, err := m.Backend.List(ctx, opt)
	if err == nil && p.NextToken != "" && len(p.Objects) > 1 {
		// Lose the entry before the last, keeping the token: a classic
		// off-by-one when paging.
		p.Objects = append(p.Objects[:len(p.Objects)-2], p.Objects[len(p.Objects)-1])
	}
	return p, err
}

type ignoreStartAfter struct{ backends.Backend }

func (m *ignoreStartAfter) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	opt.StartAfter = ""
	return m.Backend.List(ctx, opt)
}

type reversePage struct{ backends.Backend }

func (m *reversePage) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	p, err := m.Backend.List(ctx, opt)
	slices.Reverse(p.Objects)
	return p, err
}

// eagerWrite publishes an empty object as soon as a write starts.
type eagerWrite struct{ backends.Backend }

func (m *eagerWrite) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if w, err := m.Backend.Write(ctx, key, opt); err == nil {
		if _, err := w.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return m.Backend.Write(ctx, key, opt)
}

// corruptWrite flips one byte 9 MiB into every write (past a typical part
// size, so small objects are untouched).
type corruptWrite struct{ backends.Backend }

func (m *corruptWrite) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	w, err := m.Backend.Write(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &corruptWriter{Writer: w}, nil
}

type corruptWriter struct {
	backends.Writer
	off int64
}

func (w *corruptWriter) Write(p []byte) (int, error) {
	const at = 9 << 20
	if w.off <= at && at < w.off+int64(len(p)) {
		q := slices.Clone(p)
		q[at-w.off] ^= 0xff
		p = q
	}
	n, err := w.Writer.Write(p)
	w.off += int64(n)
	return n, err
}

type ignoreCancel struct{ backends.Backend }

func (m *ignoreCancel) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	return m.Backend.Stat(context.WithoutCancel(ctx), key)
}

// suffixLinks stores links the way mlfsd once did: as "NAME.mlfsdlink"
// objects holding the target, which collide with regular names.
type suffixLinks struct{ backends.Backend }

const oldLinkSuffix = ".mlfsdlink"

func (s *suffixLinks) Symlink(ctx context.Context, key, target string) error {
	if _, err := s.Stat(ctx, key+oldLinkSuffix); err == nil {
		return backends.Wrap("symlink", key, backends.ErrExist, nil)
	}
	w, err := s.Write(ctx, key+oldLinkSuffix, backends.WriteOptions{SizeHint: int64(len(target))})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, target); err != nil {
		_ = w.Abort(ctx)
		return err
	}
	_, err = w.Commit(ctx)
	return err
}

func (s *suffixLinks) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	page, err := s.Backend.List(ctx, opt)
	if err != nil || !opt.Links {
		return page, err
	}
	for i, o := range page.Objects {
		name, ok := strings.CutSuffix(o.Key, oldLinkSuffix)
		if !ok || o.IsDir {
			continue
		}
		r, err := s.Read(ctx, o.Key, backends.ReadOptions{Length: -1})
		if err != nil {
			return page, err
		}
		target, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return page, err
		}
		page.Objects[i].Key, page.Objects[i].Link, page.Objects[i].Size = name, string(target), int64(len(target))
	}
	return page, nil
}

// racyExclusive implements ExclusiveWriter the way a store without a
// conditional create would have to: look, then write. Racing callers all
// see nothing and all "win".
type racyExclusive struct{ backends.Backend }

func (m *racyExclusive) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	if _, err := m.Stat(ctx, key); err == nil {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrExist, nil)
	}
	time.Sleep(time.Millisecond) // the window every such check-then-write has
	w, err := m.Write(ctx, key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(ctx)
		return backends.ObjectInfo{}, err
	}
	return w.Commit(ctx)
}
