package job

import (
	"fmt"
	"strings"
)

// Var is one environment variable of the job.
type Var struct {
	Name, Value string
}

// Env returns the job environment in a fixed order: job name, config and
// working directories, the aggregate hyperparameter variables, one variable
// per hyperparameter, input channels, output channels, then, when compat
// is sagemaker, TRAINING_JOB_NAME and the SM_* variables in the training
// toolkit's order (host facts from p.Host, or DetectHost). warnings name
// variables left out because execve would refuse them (too long, or a NUL
// byte); hyperparameters.json stays authoritative.
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
		for _, v := range p.sageMakerEnv(p.host()) {
			if strings.ContainsRune(v.Value, 0) {
				// Only a JSON \u0000 inside a value gets here: SM_HP_<NAME>
				// carries the decoded string, as the toolkit would (and then
				// fail to exec).
				warnings = append(warnings, fmt.Sprintf("%s left out: its value holds a NUL byte (a JSON \\u0000 in the hyperparameter), which no environment variable can carry; read %s instead",
					v.Name, p.HyperparametersFile()))
				continue
			}
			if v.aggregate {
				addAggregate(v.Name, v.Value)
			} else {
				add(v.Name, v.Value)
			}
		}
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
