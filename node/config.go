package node

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// ConfigFlag is the flag that names a configuration file.
const ConfigFlag = "config"

// ApplyConfigFile sets the flags of fs from the YAML file at path: a
// mapping whose keys are flag names without the dashes (the options
// table's names, and the command's own flags such as state-dir), whose
// values are what the flag takes (a list for a repeatable or
// comma-separated flag). A flag given on the command line overrides the
// file. An unknown or repeated key, or a bad value, is an error naming the
// file and the line, and the command stops before it starts anything.
func ApplyConfigFile(path string, fs *pflag.FlagSet) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--%s: %w", ConfigFlag, err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) || err == nil && len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	} else if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a mapping of option names to values, e.g. cache-memory: 4GiB", path, top.Line)
	}
	type setting struct {
		flag   *pflag.Flag
		values []string
	}
	var todo []setting
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		name := k.Value
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be an option name", at)
		}
		if line, ok := seen[name]; ok {
			return fmt.Errorf("%s: %q is already set on line %d", at, name, line)
		}
		seen[name] = k.Line
		f := fs.Lookup(name)
		if f == nil || name == ConfigFlag || f.Hidden {
			return fmt.Errorf("%s: unknown key %q (want an option of this command without the dashes, e.g. cache-memory; see --help)", at, name)
		}
		values, err := configValues(f, v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", at, name, err)
		}
		if fs.Changed(name) {
			continue // the command line overrides the file
		}
		todo = append(todo, setting{f, values})
	}
	for _, s := range todo {
		for _, val := range s.values {
			if err := fs.Set(s.flag.Name, val); err != nil {
				return fmt.Errorf("%s:%d: %w", path, seen[s.flag.Name], err) // pflag names the flag and the value
			}
		}
	}
	return nil
}

// configValues are the values v gives flag f: one for a scalar; for a
// list, one per item of a repeatable flag, else the items joined by
// commas.
func configValues(f *pflag.Flag, v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, errors.New("needs a value")
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		var items []string
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
				return nil, errors.New("a list may hold only values")
			}
			items = append(items, it.Value)
		}
		if strings.HasSuffix(f.Value.Type(), "Array") {
			return items, nil
		}
		return []string{strings.Join(items, ",")}, nil
	}
	return nil, errors.New("want a value or a list of values")
}
