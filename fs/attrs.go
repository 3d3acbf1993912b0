package fs

import (
	"context"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mlfsd/mlfsd/backends"
)

// Attrs override the owner, group and permission bits a tree reports, as
// the uid, gid, umask, file_mode and dir_mode mount options of s3fs, ossfs
// and mountpoint-s3 do. The zero value overrides nothing. A tree with any
// override is mounted with default_permissions, so the kernel enforces
// what it shows.
type Attrs struct {
	// UID and GID, when set, own every file and directory.
	UID, GID *uint32
	// FileMode and DirMode, when set, are the permission bits of every
	// file, resp. directory (Umask does not apply to them).
	FileMode, DirMode *uint32
	// Umask clears bits of the modes the tree would otherwise show (the
	// store's, or the tree's defaults).
	Umask uint32
}

// Any reports whether a overrides anything.
func (a Attrs) Any() bool {
	return a.UID != nil || a.GID != nil || a.FileMode != nil || a.DirMode != nil || a.Umask != 0
}

// perm returns the permission bits of a file or directory whose own bits
// are bits.
func (a Attrs) perm(dir bool, bits uint32) uint32 {
	switch {
	case dir && a.DirMode != nil:
		return *a.DirMode & 0o7777
	case !dir && a.FileMode != nil:
		return *a.FileMode & 0o7777
	}
	return bits &^ a.Umask
}

// owner returns the owner and group of something owned by uid and gid.
func (a Attrs) owner(uid, gid uint32) (uint32, uint32) {
	if a.UID != nil {
		uid = *a.UID
	}
	if a.GID != nil {
		gid = *a.GID
	}
	return uid, gid
}

// apply overrides the owner and mode of out (a file or a directory).
func (a Attrs) apply(out *fuse.Attr) {
	typ := out.Mode & syscall.S_IFMT
	out.Mode = typ | a.perm(typ == syscall.S_IFDIR, out.Mode&0o7777)
	out.Uid, out.Gid = a.owner(out.Uid, out.Gid)
}

// CheckInputNotEmpty fails unless the directory channel b (called name in
// the error; "" for b's ID) holds at least one entry, with one LIST of one
// key: on an object store a prefix that does not exist and one with
// nothing under it are the same thing, and a job that mounts either as an
// input would run on no data. A mount's caller checks before a fresh
// mount, not when it takes one over.
func CheckInputNotEmpty(ctx context.Context, b backends.Backend, name string) error {
	if name == "" {
		name = b.ID()
	}
	page, err := b.List(ctx, backends.ListOptions{MaxKeys: 1})
	if err != nil {
		return fmt.Errorf("input %s: %w", name, err)
	}
	if len(page.Objects) == 0 && len(page.Prefixes) == 0 && page.NextToken == "" {
		return fmt.Errorf("input %s: nothing there (no such prefix or directory, or it is empty); check the URI, or give --allow-empty (-o allow_empty) to mount it anyway", name)
	}
	return nil
}
