package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionLine is what `mlfsd --version` prints: the version, the commit it
// was built from when known, the Go version and the platform.
func versionLine() string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("mlfsd %s%s %s %s/%s", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// addVersionFlag gives the root command --version, printing the same line
// as `mlfsd version`.
func addVersionFlag(root *cobra.Command) {
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
}
