package main

import "github.com/spf13/cobra"

func newEmulateCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "emulate",
		Short: "Serve a local directory over the OSS or HDFS protocol (tests, demos, benchmarks)",
	}
	c.AddCommand(newEmulateOSSCmd(a), newEmulateHDFSCmd(a))
	return c
}
