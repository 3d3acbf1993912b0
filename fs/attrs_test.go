package fs

import (
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestAttrsApply: file-mode and dir-mode replace the bits (umask does not
// mask them), umask masks the bits otherwise shown, uid and gid replace
// the owner; the zero Attrs change nothing.
func TestAttrsApply(t *testing.T) {
	u := func(v uint32) *uint32 { return &v }
	for _, tc := range []struct {
		name           string
		a              Attrs
		in             fuse.Attr
		mode, uid, gid uint32
	}{
		{"none", Attrs{}, fuse.Attr{Mode: syscall.S_IFREG | 0o444, Owner: fuse.Owner{Uid: 7, Gid: 8}}, syscall.S_IFREG | 0o444, 7, 8},
		{"file-mode", Attrs{FileMode: u(0o440), DirMode: u(0o550), Umask: 0o777}, fuse.Attr{Mode: syscall.S_IFREG | 0o644}, syscall.S_IFREG | 0o440, 0, 0},
		{"dir-mode", Attrs{FileMode: u(0o440), DirMode: u(0o550)}, fuse.Attr{Mode: syscall.S_IFDIR | 0o755}, syscall.S_IFDIR | 0o550, 0, 0},
		{"umask file", Attrs{Umask: 0o027}, fuse.Attr{Mode: syscall.S_IFREG | 0o775}, syscall.S_IFREG | 0o750, 0, 0},
		{"umask dir", Attrs{Umask: 0o077, DirMode: nil, FileMode: u(0o600)}, fuse.Attr{Mode: syscall.S_IFDIR | 0o755}, syscall.S_IFDIR | 0o700, 0, 0},
		{"owner", Attrs{UID: u(1000)}, fuse.Attr{Mode: syscall.S_IFREG | 0o644, Owner: fuse.Owner{Uid: 7, Gid: 8}}, syscall.S_IFREG | 0o644, 1000, 8},
		{"group", Attrs{GID: u(1000)}, fuse.Attr{Mode: syscall.S_IFREG | 0o644, Owner: fuse.Owner{Uid: 7, Gid: 8}}, syscall.S_IFREG | 0o644, 7, 1000},
	} {
		got := tc.in
		tc.a.apply(&got)
		if got.Mode != tc.mode || got.Uid != tc.uid || got.Gid != tc.gid {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", tc.name, got.Mode, got.Uid, got.Gid, tc.mode, tc.uid, tc.gid)
		}
		if (tc.name == "none") == tc.a.Any() {
			t.Errorf("%s: Any() = %v", tc.name, tc.a.Any())
		}
	}
}
