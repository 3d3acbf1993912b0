package node

import (
	"context"

	"github.com/mlfsd/mlfsd/job"
)

// JobMounter returns the job.Runner Mounter that mounts a job's channels on
// n, with the given mount options and credentials (zero: the node's own).
func (n *Node) JobMounter(opts map[string]string, c Credentials) job.Mounter {
	return &jobMounter{n: n, opts: opts, c: c}
}

type jobMounter struct {
	n    *Node
	opts map[string]string
	c    Credentials
}

func (j *jobMounter) MountInput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	return j.mount(ctx, ch, mountpoint, true)
}

func (j *jobMounter) MountOutput(ctx context.Context, ch job.Channel, mountpoint string) (job.Mounted, error) {
	return j.mount(ctx, ch, mountpoint, false)
}

func (j *jobMounter) mount(ctx context.Context, ch job.Channel, mountpoint string, ro bool) (job.Mounted, error) {
	info, err := j.n.Mount(ctx, MountRequest{URI: ch.URI.String(), Target: mountpoint, ReadOnly: ro, Options: j.opts, Credentials: j.c})
	if err != nil {
		return nil, err
	}
	return &jobMount{n: j.n, target: info.Target}, nil
}

// jobMount is one mounted channel of a job. The Runner drains outputs
// itself (a second signal aborts that), so Unmount does not drain again.
type jobMount struct {
	n      *Node
	target string
}

func (m *jobMount) Drain(ctx context.Context) error { return m.n.Drain(ctx, m.target) }

func (m *jobMount) Unmount() error { return m.n.Detach(context.Background(), m.target) }
