package main

import (
	"context"

	"github.com/spf13/pflag"

	mfs "github.com/mlfsd/mlfsd/fs"
)

// cacheConfig holds the read-path cache flags. PLACEHOLDER: filled in by the
// read-path (cache) issue.
type cacheConfig struct{}

func addCacheFlags(fs *pflag.FlagSet, c *cacheConfig) {}

// newSource returns the Source input mounts read through, and a function
// that releases it once every mount using it is gone.
func (a *app) newSource(ctx context.Context) (mfs.Source, func() error, error) {
	return mfs.DirectSource{}, func() error { return nil }, nil
}
