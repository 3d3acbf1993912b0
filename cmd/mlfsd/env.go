package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by issue 3.
func newEnvCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Print the job environment without mounting",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("env: not implemented yet")
		},
	}
}
