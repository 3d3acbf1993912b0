package main

import (
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/hdfs"
)

// addHDFSFlags registers the HDFS backend's flags. PLACEHOLDER: filled in by the HDFS issue.
func addHDFSFlags(fs *pflag.FlagSet, o *hdfs.Options) {}
