package main

import (
	"context"
	"errors"

	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends"
)

// outputConfig holds the write-back flags (staging dir, upload concurrency,
// fsync semantics...). PLACEHOLDER: filled in by the write-path issue.
type outputConfig struct{}

func addOutputFlags(fs *pflag.FlagSet, c *outputConfig) {}

// outputMount is a mounted output channel.
type outputMount interface {
	// Drain blocks until every byte written so far is durable in the backend.
	Drain(ctx context.Context) error
	// Unmount detaches the mount; call Drain first.
	Unmount() error
	// Wait blocks until the mount is detached (by Unmount or externally).
	Wait()
}

// mountOutput mounts the directory URI u read-write (write-back) at mountpoint.
// PLACEHOLDER: replaced by the write-path issue.
func mountOutput(ctx context.Context, a *app, u backends.URI, mountpoint string) (outputMount, error) {
	return nil, errors.New("output (read-write) mounts are not implemented yet")
}
