package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
)

// backendPool keeps one open backend per (store location, options,
// credentials), shared by every mount of it and closed with the last one.
type backendPool struct {
	log *slog.Logger

	mu   sync.Mutex
	open map[string]*pooled // GUARDED_BY(mu): by poolKey
}

type pooled struct {
	b    backends.Backend
	refs int // GUARDED_BY(backendPool.mu)
}

func newBackendPool(log *slog.Logger) *backendPool {
	return &backendPool{log: log, open: map[string]*pooled{}}
}

// acquire opens (or shares) the backend of u's directory. Backends are
// shared between callers of the same share key only (the node's own
// identity, or one mount's). release must be called once the caller is
// done with it.
func (p *backendPool) acquire(ctx context.Context, u backends.URI, opt all.Options, share string) (b backends.Backend, key string, release func(), err error) {
	o, err := json.Marshal(struct {
		URI   string
		Opt   all.Options
		Share string
	}{u.Dir().String(), opt, share})
	if err != nil {
		return nil, "", nil, err
	}
	pk := string(o)
	p.mu.Lock()
	if e, ok := p.open[pk]; ok {
		e.refs++
		p.mu.Unlock()
		return e.b, u.Base(), p.releaser(pk), nil
	}
	p.mu.Unlock()
	// Opened outside the lock: opening probes the store over the network.
	nb, key, err := all.Open(ctx, u, opt, p.log)
	if err != nil {
		return nil, "", nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.open[pk]; ok { // opened by another caller meanwhile
		e.refs++
		nb.Close()
		return e.b, key, p.releaser(pk), nil
	}
	p.open[pk] = &pooled{b: nb, refs: 1}
	return nb, key, p.releaser(pk), nil
}

func (p *backendPool) releaser(pk string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			e := p.open[pk]
			e.refs--
			last := e.refs == 0
			if last {
				delete(p.open, pk)
			}
			p.mu.Unlock()
			if last {
				if err := e.b.Close(); err != nil {
					p.log.Warn("closing backend", "backend", e.b.ID(), "err", err)
				}
			}
		})
	}
}

// backendCounter receives one observation per backend call: its
// operation, its error and how long it took.
type backendCounter interface {
	request(op string, err error, d time.Duration)
	readBytes(n int)
}

// instrument wraps b so that every call is counted. The optional interfaces
// of the common combinations are counted too; any other is found through
// backends.As, which unwraps the decorator.
func instrument(b backends.Backend, m backendCounter) backends.Backend {
	base := &counted{Backend: b, m: m}
	_, r := b.(backends.Renamer)
	_, c := b.(backends.Copier)
	_, d := b.(backends.DirMaker)
	_, a := b.(backends.Appender)
	switch {
	case !r && !c && !d && !a:
		return base
	case r && d && a && !c: // NAS, HDFS
		return &countedRDA{base}
	case c && d && !r && !a: // OSS
		return &countedCD{base}
	}
	return base
}

// counted is a Backend decorator counting requests by operation and
// result, and the bytes read.
type counted struct {
	backends.Backend
	m backendCounter
}

func (c *counted) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	start := time.Now()
	i, err := c.Backend.Stat(ctx, key)
	c.m.request("stat", err, time.Since(start))
	return i, err
}

func (c *counted) List(ctx context.Context, opt backends.ListOptions) (backends.ListPage, error) {
	start := time.Now()
	p, err := c.Backend.List(ctx, opt)
	c.m.request("list", err, time.Since(start))
	return p, err
}

func (c *counted) Read(ctx context.Context, key string, opt backends.ReadOptions) (io.ReadCloser, error) {
	start := time.Now()
	r, err := c.Backend.Read(ctx, key, opt)
	c.m.request("read", err, time.Since(start))
	if err != nil {
		return nil, err
	}
	return &countedReader{ReadCloser: r, m: c.m}, nil
}

func (c *counted) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	cw := &countedWriter{m: c.m, start: time.Now()}
	// A multipart upload tells its ID first: its requests count as
	// "multipart", a single PUT's as "write".
	up := opt.OnUpload
	opt.OnUpload = func(id string) {
		cw.multipart.Store(true)
		if up != nil {
			up(id)
		}
	}
	w, err := c.Backend.Write(ctx, key, opt)
	if err != nil {
		c.m.request(cw.op(), err, time.Since(cw.start))
		return nil, err
	}
	cw.Writer = w
	if _, ok := w.(backends.ReaderAtWriter); ok {
		return &countedRAWriter{cw}, nil
	}
	return cw, nil
}

// Unwrap implements backends.Unwrapper.
func (c *counted) Unwrap() backends.Backend { return c.Backend }

func (c *counted) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := c.Backend.Delete(ctx, key)
	c.m.request("delete", err, time.Since(start))
	return err
}

type countedRDA struct{ *counted }

func (c *countedRDA) Rename(ctx context.Context, from, to string) error {
	start := time.Now()
	err := c.Backend.(backends.Renamer).Rename(ctx, from, to)
	c.m.request("rename", err, time.Since(start))
	return err
}

func (c *countedRDA) MakeDir(ctx context.Context, key string) error {
	start := time.Now()
	err := c.Backend.(backends.DirMaker).MakeDir(ctx, key)
	c.m.request("mkdir", err, time.Since(start))
	return err
}

func (c *countedRDA) Append(ctx context.Context, key string) (backends.Writer, error) {
	start := time.Now()
	w, err := c.Backend.(backends.Appender).Append(ctx, key)
	c.m.request("append", err, time.Since(start))
	return w, err
}

type countedCD struct{ *counted }

func (c *countedCD) Copy(ctx context.Context, from, to string) (backends.ObjectInfo, error) {
	start := time.Now()
	i, err := c.Backend.(backends.Copier).Copy(ctx, from, to)
	c.m.request("copy", err, time.Since(start))
	return i, err
}

func (c *countedCD) MakeDir(ctx context.Context, key string) error {
	start := time.Now()
	err := c.Backend.(backends.DirMaker).MakeDir(ctx, key)
	c.m.request("mkdir", err, time.Since(start))
	return err
}

type countedReader struct {
	io.ReadCloser
	m backendCounter
}

func (r *countedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.m.readBytes(n)
	return n, err
}

// countedWriter counts a write once, at Commit, timed from its start.
type countedWriter struct {
	backends.Writer
	m         backendCounter
	start     time.Time
	multipart atomic.Bool // the backend started a multipart upload
}

// op is the operation the write counts as.
func (w *countedWriter) op() string {
	if w.multipart.Load() {
		return "multipart"
	}
	return "write"
}

func (w *countedWriter) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	i, err := w.Writer.Commit(ctx)
	w.m.request(w.op(), err, time.Since(w.start))
	return i, err
}

type countedRAWriter struct{ *countedWriter }

func (w *countedRAWriter) WriteReaderAt(r io.ReaderAt, size int64) error {
	return w.Writer.(backends.ReaderAtWriter).WriteReaderAt(r, size)
}

// resultOf is the result label of a backend call.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, backends.ErrNotExist):
		return "not_found"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}
