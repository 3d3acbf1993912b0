package oss

import (
	"context"
	"errors"
	"strings"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
)

var _ backends.Linker = (*Backend)(nil)

// ossSymlinkType is the object type OSS lists for a symlink object.
const ossSymlinkType = "Symlink"

// Symlink implements backends.Linker with an OSS symlink object
// (PutSymlink). OSS resolves such a link, on GET, as an object key in the
// bucket; mlfsd only stores the target and gives it back.
func (b *Backend) Symlink(ctx context.Context, key, target string) error {
	if key == "" || strings.HasSuffix(key, "/") {
		return backends.Wrap("symlink", key, backends.ErrInvalid, errors.New("a link needs an object name"))
	}
	if target == "" {
		return backends.Wrap("symlink", key, backends.ErrInvalid, errors.New("empty link target"))
	}
	// HEAD follows a link, so a dangling one reads as missing: ask for a
	// link too.
	if _, err := b.head(ctx, key); err == nil {
		return backends.Wrap("symlink", key, backends.ErrExist, nil)
	} else if !isNotFound(err) {
		return b.wrapErr("symlink", key, err)
	}
	if _, err := b.readLink(ctx, key); err == nil {
		return backends.Wrap("symlink", key, backends.ErrExist, nil)
	} else if !errors.Is(err, backends.ErrNotExist) {
		return err
	}
	err := b.retry(ctx, func() error {
		return b.bucket.PutSymlink(b.object(key), target, alioss.ForbidOverWrite(true), alioss.WithContext(ctx))
	})
	return b.wrapErr("symlink", key, err)
}

// readLink returns the target of the symlink object key; a missing key, or
// one that is not a link, wraps ErrNotExist.
func (b *Backend) readLink(ctx context.Context, key string) (string, error) {
	var target string
	err := b.retry(ctx, func() error {
		h, err := b.bucket.GetSymlink(b.object(key), alioss.WithContext(ctx))
		if err != nil {
			return err
		}
		target = h.Get(alioss.HTTPHeaderOssSymlinkTarget)
		return nil
	})
	if err != nil {
		if st, _ := statusOf(err); st == 400 || isNotFound(err) {
			// OSS answers 400 (NotSymlink) for an object that is no link.
			return "", backends.Wrap("readlink", key, backends.ErrNotExist, err)
		}
		return "", b.wrapErr("readlink", key, err)
	}
	if target == "" {
		return "", backends.Wrap("readlink", key, backends.ErrNotExist, errors.New("no symlink target"))
	}
	return target, nil
}
