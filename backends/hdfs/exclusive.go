package hdfs

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.ExclusiveWriter = (*backend)(nil)

// WriteExclusive implements backends.ExclusiveWriter by creating the file
// at its final path without the OVERWRITE flag: the NameNode refuses a
// create of an existing path (FileAlreadyExistsException) or of one being
// created (AlreadyBeingCreatedException) under its namespace lock, so of
// racing writers exactly one creates it. Unlike Write, the file is visible
// from the create on, empty until the close that follows the one write of
// data (HDFS's rename always overwrites, so staging cannot be used):
// callers store small records and treat an empty or torn one as held.
//
// The create is tried once: a retry of a create whose answer was lost
// would meet the file it made and report ErrExist wrongly.
func (b *backend) WriteExclusive(ctx context.Context, key string, data []byte) (backends.ObjectInfo, error) {
	if err := checkKey("write", key, true); err != nil {
		return backends.ObjectInfo{}, err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return backends.ObjectInfo{}, backends.Wrap("write", key, backends.ErrInvalid, errors.New("a write needs a file key (no trailing '/')"))
	}
	if err := ctx.Err(); err != nil {
		return backends.ObjectInfo{}, &backends.OpError{Op: "write", Key: key, Err: err}
	}
	final := b.abs(key)
	// The parent directory may be made with retries: MkdirAll of an
	// existing directory succeeds.
	err := b.do(ctx, "write", key, func(c *hdfs.Client) error { return c.MkdirAll(path.Dir(final), 0o755) })
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	c, err := b.writerClient()
	if err != nil {
		s, t := classify(err)
		return backends.ObjectInfo{}, wrap("write", key, s, t, err)
	}
	fw, err := c.Create(final)
	if err != nil {
		c.Close()
		s, t := classify(err)
		return backends.ObjectInfo{}, wrap("write", key, s, t, err)
	}
	fw.SetDeadline(time.Now().Add(b.opt.IOTimeout))
	_, err = fw.Write(data)
	if err == nil {
		err = fw.Close()
	}
	if err != nil {
		// The file is ours: remove it, so the key is free again. Closing
		// the client first ends its lease on the file.
		c.Close()
		b.do(context.WithoutCancel(ctx), "write", key, func(c *hdfs.Client) error { return c.Remove(final) })
		s, _ := classify(err)
		if s == nil || errors.Is(s, backends.ErrExist) {
			s = backends.ErrTransient
		}
		return backends.ObjectInfo{}, wrap("write", key, s, true, err)
	}
	b.putWriterClient(c)
	var fi os.FileInfo
	err = b.do(ctx, "write", key, func(c *hdfs.Client) error {
		var err error
		fi, err = c.Stat(final)
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	return info(key, fi), nil
}
