package job

import (
	"bytes"
	"path/filepath"
)

// WorkingDir is <root>/usercode: the code's home and the command's working directory.
func (p *Plan) WorkingDir() string { return filepath.Join(p.Root, "usercode") }

// ConfigDir is <root>/input/config.
func (p *Plan) ConfigDir() string { return filepath.Join(p.Root, "input", "config") }

// HyperparametersFile is <root>/input/config/hyperparameters.json.
func (p *Plan) HyperparametersFile() string {
	return filepath.Join(p.ConfigDir(), "hyperparameters.json")
}

// InputDir is the mountpoint of an input channel: <root>/input/data/<name>.
func (p *Plan) InputDir(c Channel) string { return filepath.Join(p.Root, "input", "data", c.Name) }

// InputPath is what PAI_INPUT_<CH> holds: the channel directory with a
// trailing slash, or for a single-object channel the object's path in it.
func (p *Plan) InputPath(c Channel) string {
	if c.URI.IsDir() {
		return p.InputDir(c) + "/"
	}
	return filepath.Join(p.InputDir(c), c.URI.Base())
}

// OutputDir is the mountpoint of an output channel: <root>/output/<name>.
func (p *Plan) OutputDir(c Channel) string { return filepath.Join(p.Root, "output", c.Name) }

// HyperparametersJSON is the content of hyperparameters.json (and of
// PAI_HPS): a JSON object of string values in spec order, written like
// Python's json.dumps (", " and ": " separators) but without HTML or
// non-ASCII escaping. It has no trailing newline.
func (p *Plan) HyperparametersJSON() string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, hp := range p.Hyperparameters {
		if i > 0 {
			b.WriteString(", ")
		}
		writeJSONString(&b, hp.Name)
		b.WriteString(": ")
		writeJSONString(&b, hp.Value)
	}
	b.WriteByte('}')
	return b.String()
}
