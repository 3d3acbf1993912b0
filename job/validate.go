package job

import (
	"net/url"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
)

// maxEnvString is Linux's MAX_ARG_STRLEN: the longest "NAME=value" string,
// counting its terminating NUL, that execve accepts.
const maxEnvString = 32 * 4096

// fitsEnv reports whether NAME=value can be passed to a process.
func fitsEnv(name, value string) bool { return len(name)+1+len(value)+1 <= maxEnvString }

func (ps *parser) uri(field, s string) (backends.URI, bool) {
	if strings.Contains(s, SpecDirVar) {
		if ps.opt.SpecDir == "" {
			ps.addf(field, "uses %s but the spec was not read from a file", SpecDirVar)
			return backends.URI{}, false
		}
		s = strings.ReplaceAll(s, SpecDirVar, (&url.URL{Path: ps.opt.SpecDir}).EscapedPath())
	}
	u, err := backends.ParseURI(s)
	if err != nil {
		ps.addf(field, "%v", err)
		return backends.URI{}, false
	}
	return u, true
}

// check applies the semantic rules and builds the plan.
func (ps *parser) check(r *raw) *Plan {
	p := &Plan{Name: r.name, Command: r.command, Shell: r.shell}

	if r.name == "" && !ps.has("name") {
		ps.addf("name", "required")
	} else if strings.ContainsRune(r.name, 0) {
		ps.addf("name", "contains a NUL byte")
	}
	if ps.opt.RequireCommand && len(r.command) == 0 && !ps.has("command") {
		ps.addf("command", "required by mlfsd run (or give the command after --)")
	}

	p.Root = DefaultRoot
	switch {
	case ps.opt.Root != "":
		abs, err := filepath.Abs(ps.opt.Root)
		if err != nil {
			ps.addf("root", "%v", err)
		}
		p.Root = abs
	case r.root != "":
		if !filepath.IsAbs(r.root) {
			ps.addf("root", "%q: want an absolute path", r.root)
		}
		p.Root = filepath.Clean(r.root)
	}

	compat := r.compat
	if ps.opt.Compat != "" {
		compat = ps.opt.Compat
	}
	switch compat {
	case "", "none":
	case CompatSageMaker:
		p.Compat = CompatSageMaker
	default:
		ps.addf("compat", "%q: want %q (or leave it out)", compat, CompatSageMaker)
	}

	if r.code != "" {
		if u, ok := ps.uri("code", r.code); ok {
			p.Code = &u
		}
	}

	ps.checkHyperparameters(p, r.hps)
	if p.Compat == CompatSageMaker {
		ps.checkSageMaker(p)
	}

	inputNames := map[string]bool{}
	p.Inputs = ps.checkChannels("inputs", "PAI_INPUT_", r.inputs, nil)
	for _, c := range r.inputs {
		inputNames[c.name] = true
	}
	p.Outputs = ps.checkChannels("outputs", "PAI_OUTPUT_", r.outputs, inputNames)
	for i := range p.Outputs {
		if u := p.Outputs[i].URI; !u.IsDir() {
			ps.addf("outputs."+p.Outputs[i].Name, "%s: an output channel is a directory; end the URI with '/'", u)
		}
	}

	var base *backends.URI
	if ps.opt.OutputPath != "" {
		r.outputPath = ps.opt.OutputPath
	}
	if r.outputPath != "" {
		s := r.outputPath
		if !strings.HasSuffix(s, "/") {
			s += "/" // output_path is a base directory whatever its spelling
		}
		if u, ok := ps.uri("output_path", s); ok {
			base = &u
		}
	}
	declared := map[string]bool{}
	for _, c := range p.Outputs {
		declared[c.Var] = true
	}
	for _, d := range defaultOutputs(p.Compat) {
		c := Channel{Name: d, Var: VarName(d)}
		if declared[c.Var] {
			continue // the spec's own channel of that name wins
		}
		if base != nil {
			c.URI = base.Join(d)
		} else {
			c.Local = true
		}
		p.Outputs = append(p.Outputs, c)
	}
	return p
}

func (ps *parser) checkHyperparameters(p *Plan, hps []Hyperparameter) {
	byVar := map[string]string{}
	byName := map[string]bool{}
	for i, hp := range hps {
		field := "hyperparameters." + hp.Name
		line := 0 // each at its own line, even when names repeat
		if i < len(ps.hpLines) {
			line = ps.hpLines[i]
		}
		addf := func(field, format string, args ...any) { ps.addAt(line, field, format, args...) }
		ok := true
		if hp.Name == "" {
			addf("hyperparameters", "empty name")
			ok = false
		}
		if byName[hp.Name] && hp.Name != "" {
			addf(field, "given more than once")
			continue
		}
		byName[hp.Name] = true
		if strings.ContainsRune(hp.Name, 0) {
			addf(field, "name contains a NUL byte")
			ok = false
		}
		if strings.ContainsRune(hp.Value, 0) {
			addf(field, "value contains a NUL byte, which no environment variable can carry")
			ok = false
		}
		v := "PAI_HPS_" + VarName(hp.Name)
		if hp.Name != "" {
			if other, dup := byVar[v]; dup {
				addf(field, "%q and %q both become %s; rename one", other, hp.Name, v)
				ok = false
			} else {
				byVar[v] = hp.Name
			}
		}
		if !fitsEnv(v, hp.Value) {
			addf(field, "value is %d bytes; %s=value must fit in %d bytes to reach a process", len(hp.Value), v, maxEnvString-1)
			ok = false
		}
		if ok {
			p.Hyperparameters = append(p.Hyperparameters, hp)
		}
	}
}

// checkChannels validates one channel map. clash holds names that may not
// be reused (the input channels, when checking outputs).
func (ps *parser) checkChannels(field, prefix string, in []namedURI, clash map[string]bool) []Channel {
	var out []Channel
	byVar := map[string]string{}
	byName := map[string]bool{}
	for _, c := range in {
		f := field + "." + c.name
		if c.name == "" {
			ps.addAt(ps.lines[f], field, "empty channel name")
			continue
		}
		ok := true
		if byName[c.name] {
			ps.addf(f, "given more than once")
			continue
		}
		byName[c.name] = true
		if err := checkChannelName(c.name); err != nil {
			ps.addf(f, "%v", err)
			ok = false
		} else if other, dup := byVar[VarName(c.name)]; dup {
			ps.addf(f, "channels %q and %q both become %s%s; rename one", other, c.name, prefix, VarName(c.name))
			ok = false
		} else {
			byVar[VarName(c.name)] = c.name
		}
		if clash[c.name] {
			ps.addf(f, "an input channel has the same name; input and output channels need distinct names")
			ok = false
		}
		u, uok := ps.uri(f, c.uri)
		if ok && uok {
			out = append(out, Channel{Name: c.name, Var: VarName(c.name), URI: u})
		}
	}
	return out
}

// checkSageMaker applies what compat sagemaker adds: each user
// hyperparameter becomes SM_HP_<name.upper()>, which must be a name an
// environment can hold and must not collide with another's, and the
// hyperparameters the toolkit itself interprets must have a type it accepts.
func (ps *parser) checkSageMaker(p *Plan) {
	byVar := map[string]string{}
	for _, hp := range p.Hyperparameters {
		field := "hyperparameters." + hp.Name
		if isSageMakerHyperparameter(hp.Name) {
			if hp.Name == "sagemaker_distribution_instance_groups" {
				if _, ok := pyLoadsOrString(hp.Value).(pyList); !ok {
					ps.addf(field, "%q: want a JSON list of instance group names, e.g. [\"%s\"]", hp.Value, smInstanceGroup)
				}
			}
			continue
		}
		v := smHPVar(hp.Name)
		if strings.Contains(hp.Name, "=") {
			ps.addf(field, "with compat sagemaker the name becomes %s, and no environment variable name can hold '='", v)
			continue
		}
		if other, dup := byVar[v]; dup {
			ps.addf(field, "%q and %q both become %s; rename one", other, hp.Name, v)
			continue
		}
		byVar[v] = hp.Name
	}
}
