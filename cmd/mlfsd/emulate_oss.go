package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the OSS issue.
func newEmulateOSSCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "oss",
		Short: "Serve a directory over the OSS protocol",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("emulate oss: not implemented yet")
		},
	}
}
