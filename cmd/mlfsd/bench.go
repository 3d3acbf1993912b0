package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by issue 8.
func newBenchCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Measure training I/O throughput of a directory",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("bench: not implemented yet")
		},
	}
}
