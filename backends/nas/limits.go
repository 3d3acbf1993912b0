package nas

import "golang.org/x/sys/unix"

var _ interface{ NameLimits() (int, int) } = (*backend)(nil)

// NameLimits implements backends.NameLimiter: the root filesystem's name
// length (statfs f_namelen, 255 on most) and PATH_MAX-1 bytes for the key.
// The root's own path does not count: every key is resolved from the
// root's descriptor (openBeneath), so the longest key is the longest path
// a system call takes, as on a local filesystem.
func (b *backend) NameLimits() (component, key int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	component = 255
	if b.rootfd >= 0 {
		var st unix.Statfs_t
		if err := unix.Fstatfs(b.rootfd, &st); err == nil && st.Namelen > 0 {
			component = int(st.Namelen)
		}
	}
	return component, unix.PathMax - 1
}
