package job

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
)

// Var is one environment variable of the job.
type Var struct {
	Name, Value string
}

// Env returns the job environment in a fixed order: job name, config and
// working directories, the aggregate hyperparameter variables, one variable
// per hyperparameter, input channels, output channels, then the SageMaker
// variables when compat is on. warnings name aggregate variables left out
// because they would exceed what execve accepts (the file stays authoritative).
func (p *Plan) Env() (vars []Var, warnings []string) {
	add := func(name, value string) { vars = append(vars, Var{name, value}) }
	addAggregate := func(name, value string) {
		if fitsEnv(name, value) {
			add(name, value)
			return
		}
		warnings = append(warnings, fmt.Sprintf("%s left out: %s=value would be %d bytes, more than the %d an environment variable can hold; read %s instead",
			name, name, len(name)+1+len(value), maxEnvString-1, p.HyperparametersFile()))
	}

	add("PAI_JOB_NAME", p.Name)
	add("PAI_CONFIG_DIR", p.ConfigDir()+"/")
	add("PAI_WORKING_DIR", p.WorkingDir()+"/")
	hps := p.HyperparametersJSON()
	addAggregate("PAI_HPS", hps)
	addAggregate("PAI_USER_ARGS", p.UserArgs())
	for _, hp := range p.Hyperparameters {
		add("PAI_HPS_"+VarName(hp.Name), hp.Value)
	}
	for _, c := range p.Inputs {
		add("PAI_INPUT_"+c.Var, p.InputPath(c))
	}
	for _, c := range p.Outputs {
		add("PAI_OUTPUT_"+c.Var, p.OutputDir(c)+"/")
	}

	if p.Compat == CompatSageMaker {
		addAggregate("SM_HPS", hps)
		addAggregate("SM_USER_ARGS", p.userArgsJSON())
		for _, hp := range p.Hyperparameters {
			add("SM_HP_"+VarName(hp.Name), hp.Value)
		}
		var ch bytes.Buffer
		ch.WriteByte('[')
		for i, c := range p.Inputs {
			if i > 0 {
				ch.WriteString(", ")
			}
			writeJSONString(&ch, c.Name)
		}
		ch.WriteByte(']')
		add("SM_CHANNELS", ch.String())
		for _, c := range p.Inputs {
			// A SageMaker channel is always a directory (code joins file
			// names onto it), so a single-object channel points at its
			// directory here, unlike PAI_INPUT_<CH>.
			add("SM_CHANNEL_"+c.Var, p.InputDir(c))
		}
		add("SM_MODEL_DIR", filepath.Join(p.Root, "output", "model"))
		add("SM_OUTPUT_DATA_DIR", filepath.Join(p.Root, "output", "data"))
		add("SM_INPUT_CONFIG_DIR", p.ConfigDir())
	}
	return vars, warnings
}

// UserArgs is PAI_USER_ARGS: "--<name> <value>" per hyperparameter, each
// token quoted like Python's shlex.quote. It is meant for shlex.split (or
// argparse on it), which restores every value exactly; word splitting by
// `sh -c 'train $PAI_USER_ARGS'` does not remove quotes, so values with
// spaces or quotes do not survive that form.
func (p *Plan) UserArgs() string {
	toks := make([]string, 0, 2*len(p.Hyperparameters))
	for _, a := range p.UserArgv() {
		toks = append(toks, shellQuote(a))
	}
	return strings.Join(toks, " ")
}

// UserArgv is the unquoted argument list behind PAI_USER_ARGS:
// "--<name>", "<value>", ... It is what `mlfsd run` puts in place of a
// "$PAI_USER_ARGS" element of an argv command, losslessly.
func (p *Plan) UserArgv() []string {
	argv := make([]string, 0, 2*len(p.Hyperparameters))
	for _, hp := range p.Hyperparameters {
		argv = append(argv, "--"+hp.Name, hp.Value)
	}
	return argv
}

// userArgsJSON is SM_USER_ARGS: the JSON list "--name", "value", ...
func (p *Plan) userArgsJSON() string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, a := range p.UserArgv() {
		if i > 0 {
			b.WriteString(", ")
		}
		writeJSONString(&b, a)
	}
	b.WriteByte(']')
	return b.String()
}
