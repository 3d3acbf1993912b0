package job

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mlfsd/mlfsd/backends"
)

// DefaultRoot is where the layout lives unless the spec or --root says otherwise.
const DefaultRoot = "/ml"

// CompatSageMaker turns on the SM_* variables as well as PAI_*.
const CompatSageMaker = "sagemaker"

// SpecDirVar, written in a URI of the spec, stands for the absolute directory
// of the spec file (URL-escaped), so an example can ship data next to its spec.
const SpecDirVar = "${SPEC_DIR}"

// defaultOutputs are the output channels every job has. The data channel
// exists only for SageMaker compatibility (SM_OUTPUT_DATA_DIR points at it).
func defaultOutputs(compat string) []string {
	d := []string{"model", "checkpoints", "logs", "tensorboard"}
	if compat == CompatSageMaker {
		d = append(d, "data")
	}
	return d
}

// Hyperparameter is one name -> value pair; Value is the text as written in
// the spec (a list or map value is compact JSON).
type Hyperparameter struct {
	Name, Value string
}

// Channel is one input or output channel of a plan.
type Channel struct {
	// Name is the channel name as written; it names the directory.
	Name string
	// Var is the sanitised, upper-cased name used in variable names.
	Var string
	// URI is where the data lives. It is the zero URI when Local is set.
	URI backends.URI
	// Local marks a default output channel that has no URI (no output_path):
	// a plain directory under the root, mounted from nowhere, kept after the run.
	Local bool
}

// Plan is a validated job: everything mlfsd env and mlfsd run need, resolved.
type Plan struct {
	Name string
	// Command is the argv to run; when Shell is set it holds one string
	// that runs with `sh -c`. Empty when the spec gives none.
	Command []string
	Shell   bool
	// Code, when not nil, is copied into the working directory before the run.
	Code            *backends.URI
	Hyperparameters []Hyperparameter
	Inputs          []Channel
	// Outputs holds the declared output channels in spec order, then the
	// default channels not declared.
	Outputs []Channel
	// Root is the absolute, clean root of the layout.
	Root string
	// Compat is "" or CompatSageMaker.
	Compat string
	// Host, when set, gives the host facts of the SageMaker variables
	// (SM_NUM_GPUS, ...); nil means DetectHost when they are computed.
	Host *Host
}

// Options adjust how a spec is read.
type Options struct {
	// SpecDir replaces ${SPEC_DIR} in URIs; "" makes its use an error.
	SpecDir string
	// Root, when set, overrides the spec's root (made absolute).
	Root string
	// Compat, when set, overrides the spec's compat ("none" turns it off).
	Compat string
	// OutputPath, when set, overrides the spec's output_path.
	OutputPath string
	// RequireCommand makes a spec without a command invalid (mlfsd run
	// without a command after --).
	RequireCommand bool
}

// Problem is one thing wrong with a spec, tied to the field it is about.
type Problem struct {
	Line  int    // line in the spec file, 0 when unknown (JSON, or a missing field)
	Field string // e.g. "inputs.train data"; "" for the spec as a whole
	Msg   string
}

func (p Problem) String() string {
	s := p.Msg
	if p.Field != "" {
		s = p.Field + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: %s", p.Line, s)
	}
	return s
}

// SpecError lists every problem found in a spec, in the order found.
type SpecError struct {
	File     string // "" when the spec did not come from a file
	Problems []Problem
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString("invalid job spec")
	if e.File != "" {
		b.WriteString(" " + e.File)
	}
	if len(e.Problems) == 1 {
		b.WriteString(": " + e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, " (%d problems):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Load reads and validates the spec file at path. ${SPEC_DIR} in its URIs
// stands for the file's absolute directory unless opt.SpecDir is set.
func Load(path string, opt Options) (*Plan, error) {
	data, err := readSpec(path)
	if err != nil {
		return nil, fmt.Errorf("read job spec: %w", err)
	}
	if opt.SpecDir == "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("job spec %s: %w", path, err)
		}
		opt.SpecDir = filepath.Dir(abs)
	}
	p, err := Parse(data, opt)
	if se, ok := err.(*SpecError); ok {
		se.File = path
	}
	return p, err
}

// CheckCompat reports what is wrong with a compat value given as an option
// (Options.Compat, the --compat flag): "sagemaker", "none" or "".
func CheckCompat(compat string) error {
	switch compat {
	case "", "none", CompatSageMaker:
		return nil
	}
	return fmt.Errorf("%q: want %q or \"none\"", compat, CompatSageMaker)
}

// Parse validates a YAML (or JSON) spec. Every problem is reported at once
// in a *SpecError. A bad opt.Compat is the caller's mistake, not the
// spec's: it is a plain error, returned before the spec is read.
func Parse(data []byte, opt Options) (*Plan, error) {
	if err := CheckCompat(opt.Compat); err != nil {
		return nil, fmt.Errorf("compat option %w", err)
	}
	ps := &parser{opt: opt}
	p := ps.parse(data)
	if len(ps.problems) > 0 {
		// In file order; problems about missing fields (line 0) last.
		sort.SliceStable(ps.problems, func(i, j int) bool {
			li, lj := ps.problems[i].Line, ps.problems[j].Line
			return li != 0 && (lj == 0 || li < lj)
		})
		return nil, &SpecError{Problems: ps.problems}
	}
	return p, nil
}

// parser accumulates problems while it walks the YAML tree.
type parser struct {
	opt      Options
	problems []Problem
	lines    map[string]int // field -> line where it was last seen
	hpLines  []int          // line of each hyperparameter, in the order parsed
}

// at records the line of field, for the problems reported about it.
func (ps *parser) at(field string, n *yaml.Node) {
	if ps.lines == nil {
		ps.lines = map[string]int{}
	}
	ps.lines[field] = n.Line
}

func (ps *parser) addf(field, format string, args ...any) {
	ps.problems = append(ps.problems, Problem{Line: ps.lines[field], Field: field, Msg: fmt.Sprintf(format, args...)})
}

// addAt records a problem about field at the given line.
func (ps *parser) addAt(line int, field, format string, args ...any) {
	ps.problems = append(ps.problems, Problem{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// has reports whether a problem about field was already reported.
func (ps *parser) has(field string) bool {
	for _, p := range ps.problems {
		if p.Field == field {
			return true
		}
	}
	return false
}
