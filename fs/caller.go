package fs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// callerProcess is the process (thread group) of the request in ctx, 0 when
// unknown. FUSE names the calling thread; its thread group is read from
// /proc, so that any thread of the process that opened a file counts as
// that process.
func callerProcess(ctx context.Context) int {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return 0
	}
	tgid, err := threadGroup(int(c.Pid))
	if err != nil {
		return 0
	}
	return tgid
}

// threadGroup reads the Tgid of thread tid from /proc.
func threadGroup(tid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no Tgid", tid)
}
