package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by issue 2 (being written now).
func newMountCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mount",
		Short: "Mount a channel URI at a mountpoint",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("mount: not implemented yet")
		},
	}
}
