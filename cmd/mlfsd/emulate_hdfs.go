package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the HDFS issue.
func newEmulateHDFSCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "hdfs",
		Short: "Serve a directory over the HDFS protocol",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("emulate hdfs: not implemented yet")
		},
	}
}
