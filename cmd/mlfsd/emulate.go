package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by issue 4/5.
func newEmulateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "emulate",
		Short: "Serve a local directory over the OSS or HDFS protocol",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("emulate: not implemented yet")
		},
	}
}
