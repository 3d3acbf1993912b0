package hdfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// Write starts a streaming write of key into a temporary file under the
// staging directory; Commit renames it into place.
func (b *backend) Write(ctx context.Context, key string, opt backends.WriteOptions) (backends.Writer, error) {
	if err := checkKey("write", key, true); err != nil {
		return nil, err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return nil, backends.Wrap("write", key, backends.ErrInvalid, errors.New("a write needs a file key (no trailing '/')"))
	}
	w := &writer{b: b, key: key}
	// Each writer has a client of its own: its lease must not die with
	// the shared client when a metadata call replaces it.
	err := b.retry(ctx, "write", key, func() error {
		c, err := b.writerClient()
		if err != nil {
			return err
		}
		if err := c.MkdirAll(b.stagingPath(), 0o755); err != nil {
			c.Close()
			return err
		}
		// A fresh name per attempt: a create whose answer was lost may
		// have made the previous one.
		var rnd [12]byte
		rand.Read(rnd[:])
		tmp := b.stagingPath() + "/" + hex.EncodeToString(rnd[:])
		fw, err := c.Create(tmp)
		if err != nil {
			c.Close()
			if brokenConn(err) {
				// The create may have happened with its answer lost:
				// remove what it made (once; the next attempt moves on).
				if sc, err := b.shared(); err == nil {
					sc.Remove(tmp)
				}
			}
			return err
		}
		w.c, w.fw, w.tmp = c, fw, tmp
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Append starts an append to an existing file. Appended bytes become
// visible in HDFS as their blocks complete; Abort truncates the file back
// to its length before the append.
func (b *backend) Append(ctx context.Context, key string) (backends.Writer, error) {
	if err := checkKey("append", key, true); err != nil {
		return nil, err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return nil, backends.Wrap("append", key, backends.ErrInvalid, errors.New("an append needs a file key (no trailing '/')"))
	}
	w := &writer{b: b, key: key, appending: true}
	err := b.retry(ctx, "append", key, func() error {
		c, err := b.writerClient()
		if err != nil {
			return err
		}
		fi, err := c.Stat(b.abs(key))
		if err != nil {
			c.Close()
			return err
		}
		if fi.IsDir() {
			c.Close()
			return backends.ErrIsDir
		}
		fw, err := c.Append(b.abs(key))
		if err != nil {
			c.Close()
			return err
		}
		w.c, w.fw, w.origSize = c, fw, fi.Size()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

type writer struct {
	b   *backend
	key string
	tmp string // staging path ("" for an append)

	appending bool
	origSize  int64 // length before an append

	c   *hdfs.Client
	fw  *hdfs.FileWriter
	err error // first failure; the writer is dead after it
	// done is set once Commit or Abort finished; Abort after it is a no-op.
	done bool
}

var errFinished = fmt.Errorf("%w: write already committed or aborted", backends.ErrInvalid)

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, backends.Wrap("write", w.key, nil, errFinished)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.fw.SetDeadline(time.Now().Add(w.b.opt.IOTimeout))
	n, err := w.fw.Write(p)
	if err != nil {
		s, t := classify(err)
		if t || s == nil {
			s = backends.ErrTransient // the block pipeline cannot be resumed
		}
		w.err = wrap("write", w.key, s, true, err)
		return n, w.err
	}
	return n, nil
}

// Commit closes the HDFS file and, for a new write, renames it into place.
func (w *writer) Commit(ctx context.Context) (backends.ObjectInfo, error) {
	if w.done {
		return backends.ObjectInfo{}, backends.Wrap("commit", w.key, nil, errFinished)
	}
	if w.err != nil {
		err := w.err
		w.Abort(context.Background())
		return backends.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		w.Abort(context.Background())
		return backends.ObjectInfo{}, &backends.OpError{Op: "commit", Key: w.key, Err: err}
	}
	w.fw.SetDeadline(time.Now().Add(w.b.opt.IOTimeout))
	if err := w.fw.Close(); err != nil {
		s, _ := classify(err)
		if s == nil {
			s = backends.ErrTransient
		}
		w.err = wrap("commit", w.key, s, true, err)
		err := w.err
		w.Abort(context.Background())
		return backends.ObjectInfo{}, err
	}
	// The file is complete: the writer's own client (and lease) has done
	// its job and can serve another writer. What remains goes through the
	// shared client, which is replaced if its connection breaks.
	w.finish(true)
	if w.appending {
		var fi os.FileInfo
		err := w.b.do(ctx, "commit", w.key, func(c *hdfs.Client) error {
			var err error
			fi, err = c.Stat(w.b.abs(w.key))
			return err
		})
		if err != nil {
			return backends.ObjectInfo{}, err
		}
		return info(w.key, fi), nil
	}
	// The version comes from the staged file: file id, mtime and size all
	// survive the rename, and reading it before the rename means a racing
	// writer's file can never be reported as ours.
	var out backends.ObjectInfo
	final := w.b.abs(w.key)
	err := w.b.do(ctx, "commit", w.key, func(c *hdfs.Client) error {
		fi, err := c.Stat(w.tmp)
		if errors.Is(err, os.ErrNotExist) && out.Version != "" {
			// A rename whose answer was lost: it happened if the final
			// name now holds our file.
			ffi, ferr := c.Stat(final)
			if ferr == nil && info(w.key, ffi).Version == out.Version {
				return nil
			}
			if ferr != nil && !errors.Is(ferr, os.ErrNotExist) {
				return ferr // cannot tell yet: try again
			}
		}
		if err != nil {
			return err
		}
		out = info(w.key, fi)
		if dfi, err := c.Stat(final); err == nil && dfi.IsDir() {
			return fmt.Errorf("%w: %q is a directory", backends.ErrIsDir, w.key)
		}
		if err := c.MkdirAll(path.Dir(final), 0o755); err != nil {
			return err
		}
		return c.Rename(w.tmp, final)
	})
	if err != nil {
		w.discardStaged()
		return backends.ObjectInfo{}, err
	}
	return out, nil
}

// Abort discards the write: the staged file goes, an append is cut back.
func (w *writer) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	if w.err == nil {
		// Close the file first so HDFS releases its lease.
		w.fw.Close()
	}
	// Closing the writer's client ends its lease, so the NameNode lets
	// the file be removed or truncated.
	w.finish(false)
	if w.appending {
		err := w.b.do(ctx, "abort", w.key, func(c *hdfs.Client) error {
			_, err := c.Truncate(w.b.abs(w.key), w.origSize)
			return err
		})
		return err
	}
	return w.discardStaged()
}

// discardStaged removes the staged file (best effort, bounded retries).
func (w *writer) discardStaged() error {
	err := w.b.do(context.Background(), "abort", w.key, func(c *hdfs.Client) error {
		return c.Remove(w.tmp)
	})
	if errors.Is(err, backends.ErrNotExist) {
		return nil
	}
	return err
}

// finish ends the writer; reuse hands its client to the next writer (only
// after a clean Commit: a failed write may leave the lease held or the
// connection broken, and closing the client is what releases both).
func (w *writer) finish(reuse bool) {
	if w.done {
		return
	}
	w.done = true
	if reuse {
		w.b.putWriterClient(w.c)
	} else {
		w.c.Close()
	}
}

// maxIdleWriterClients bounds the clients kept for the next writers.
const maxIdleWriterClients = 8

// writerClient returns an idle writer client or connects a new one.
func (b *backend) writerClient() (*hdfs.Client, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if n := len(b.idle); n > 0 {
		c := b.idle[n-1]
		b.idle = b.idle[:n-1]
		b.mu.Unlock()
		return c, nil
	}
	b.mu.Unlock()
	return b.newClient()
}

func (b *backend) putWriterClient(c *hdfs.Client) {
	b.mu.Lock()
	if !b.closed && len(b.idle) < maxIdleWriterClients {
		b.idle = append(b.idle, c)
		c = nil
	}
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
