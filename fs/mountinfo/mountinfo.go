// Package mountinfo reads this process's mount table, /proc/self/mountinfo:
// the one place mlfsd parses it (stale-mount recovery, the CSI node
// service and the mount helper all ask it what is mounted where).
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mount is one line of the table.
type Mount struct {
	// Point is where it is mounted, FSType its type ("fuse.mlfsd") and
	// Source what it mounts (for mlfsd, the channel URI).
	Point, FSType, Source string
	// Dev is the mount's device, "major:minor"; for FUSE the minor
	// names the connection in /sys/fs/fuse/connections.
	Dev string
}

// Lookup returns the mount at exactly path (made absolute), the last one in
// the table when mounts are stacked: the one on top. A stale FUSE mount is
// listed like any other.
func Lookup(path string) (Mount, bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Mount{}, false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Mount{}, false, err
	}
	defer f.Close()
	var found Mount
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, good := parse(sc.Text()); good && m.Point == abs {
			found, ok = m, true
		}
	}
	if err := sc.Err(); err != nil {
		return Mount{}, false, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return found, ok, nil
}

// parse reads one line: "id parent major:minor root mountpoint options
// [optional fields...] - fstype source superoptions".
func parse(line string) (Mount, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	f, g := strings.Fields(pre), strings.Fields(post)
	if !ok || len(f) < 5 || len(g) < 2 {
		return Mount{}, false
	}
	return Mount{Point: unescape(f[4]), FSType: g[0], Source: unescape(g[1]), Dev: f[2]}, true
}

// unescape undoes the octal escapes of the table (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
