package main

import (
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends/oss"
)

// addOSSFlags registers the OSS backend's flags. PLACEHOLDER: filled in by the OSS issue.
func addOSSFlags(fs *pflag.FlagSet, o *oss.Options) {}
