package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/job"
)

// jobFlags are the flags mlfsd env and mlfsd run share.
type jobFlags struct {
	spec, root, compat, outputPath string
}

func addJobFlags(fs *pflag.FlagSet, o *jobFlags) {
	fs.StringVar(&o.spec, "spec", "", "job spec file, YAML or JSON (required)")
	fs.StringVar(&o.root, "root", "", "root of the job layout (default: the spec's root, else "+job.DefaultRoot+")")
	fs.StringVar(&o.outputPath, "output-path", "", "base URI of the default output channels (overrides the spec's output_path)")
	fs.StringVar(&o.compat, "compat", "", `also set another platform's variables: "sagemaker" ("none" overrides the spec)`)
}

// load reads and validates the spec the flags name.
func (o *jobFlags) load(requireCommand bool) (*job.Plan, error) {
	if o.spec == "" {
		return nil, errors.New("--spec is required")
	}
	if err := job.CheckCompat(o.compat); err != nil {
		return nil, fmt.Errorf("--compat %w", err) // the flag's mistake, not the spec's
	}
	return job.Load(o.spec, job.Options{Root: o.root, Compat: o.compat, OutputPath: o.outputPath, RequireCommand: requireCommand})
}

func newEnvCmd(a *app) *cobra.Command {
	var o jobFlags
	var format string
	c := &cobra.Command{
		Use:   "env --spec job.yaml [--root R] [--format shell|dotenv|json]",
		Short: "Print the job environment without mounting",
		Long: `Print the environment mlfsd run gives the job's command (PAI_*, and SM_* with
--compat sagemaker), without mounting or creating anything.

Formats:
  shell   export NAME='value' lines; eval "$(mlfsd env --spec job.yaml)" restores
          every value byte for byte (a ' is written '\''); a name no shell can hold
          (SageMaker's SM_HP_BATCH-SIZE) is a "# not a shell name" comment
  dotenv  NAME="value" lines; inside the quotes \\ is a backslash, \" a double quote,
          \n a newline and \r a carriage return; all else is literal. A value ending
          in a backslash is written unquoted (NAME=value\), which python-dotenv reads
          literally; one it cannot read at all is a "# not representable" comment.
          python-dotenv expands ${NAME} in values unless interpolate=False.
  json    one JSON object of string values, in the same order

${SPEC_DIR} in the spec's URIs stands for the spec file's directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch format {
			case job.FormatShell, job.FormatDotenv, job.FormatJSON:
			default:
				return errors.New(`--format: want shell, dotenv or json`)
			}
			p, err := o.load(false)
			if err != nil {
				return err
			}
			vars, warnings := p.Env()
			for _, w := range warnings {
				a.log.Warn(w)
			}
			return job.WriteEnv(a.stdout, format, vars)
		},
	}
	addJobFlags(c.Flags(), &o)
	c.Flags().StringVar(&format, "format", job.FormatShell, "output format: shell, dotenv or json")
	return c
}
