// Package oss is the mlfsd backend for oss:// URIs.
package oss

import (
	"context"
	"errors"
	"log/slog"

	"github.com/mlfsd/mlfsd/backends"
)

// Options configures the backend. PLACEHOLDER: filled in by its issue.
type Options struct{}

// New opens the backend rooted at the directory URI u.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	return nil, errors.New("oss backend: not implemented yet")
}
