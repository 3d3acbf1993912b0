package main

import (
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/all"
)

// addBackendFlags registers the flags that configure backends. Secrets are
// never flags: they come from the environment or a credentials file, so they
// cannot show up in a process listing.
func addBackendFlags(fs *pflag.FlagSet, o *all.Options) {
	addOSSFlags(fs, &o.OSS)
	addHDFSFlags(fs, &o.HDFS)
}
