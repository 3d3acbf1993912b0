package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by issue 3.
func newRunCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run a training job with its channels mounted",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("run: not implemented yet")
		},
	}
}
