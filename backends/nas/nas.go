// Package nas is the mlfsd backend for nas:// (and file://) URIs: a POSIX
// directory, typically an NFS or CPFS mount on the host.
package nas

import (
	"context"
	"errors"
	"log/slog"

	"github.com/mlfsd/mlfsd/backends"
)

// Options configures the backend.
type Options struct{}

// New opens the backend rooted at the directory URI u.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	return nil, errors.New("nas backend: not implemented yet")
}
