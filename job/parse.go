package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// raw is the spec as written, before semantic checks.
type raw struct {
	name, code, outputPath, root, compat string
	command                              []string
	shell                                bool
	hps                                  []Hyperparameter
	inputs, outputs                      []namedURI
}

type namedURI struct{ name, uri string }

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func (ps *parser) parse(data []byte) *Plan {
	if len(data) > MaxSpecBytes {
		ps.addf("", "%s", errTooLarge)
		return nil
	}
	var top *yaml.Node
	if looksLikeJSON(data) {
		n, err := jsonToNode(data)
		if err != nil {
			// Perhaps a YAML flow mapping ({name: x}) rather than JSON.
			var doc yaml.Node
			if yerr := yaml.Unmarshal(data, &doc); yerr != nil || len(doc.Content) == 0 {
				ps.addf("", "not valid JSON: %v", err)
				return nil
			}
			if expandedSize(&doc, maxSpecNodes, map[*yaml.Node]int{}) > maxSpecNodes {
				ps.addf("", "%s", errAliases)
				return nil
			}
			n = resolve(doc.Content[0])
		}
		top = n
	} else {
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			ps.addf("", "not valid YAML: %v", err)
			return nil
		}
		if doc.Kind == 0 || len(doc.Content) == 0 {
			ps.addf("", "empty spec")
			return nil
		}
		if expandedSize(&doc, maxSpecNodes, map[*yaml.Node]int{}) > maxSpecNodes {
			ps.addf("", "%s", errAliases)
			return nil
		}
		top = resolve(doc.Content[0])
	}
	if top.Kind != yaml.MappingNode {
		ps.addf("", "want a mapping of %s", strings.Join(specKeys(), ", "))
		return nil
	}
	var r raw
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := resolve(top.Content[i]), resolve(top.Content[i+1])
		key := k.Value
		ps.at(key, k)
		if seen[key] {
			ps.addf(key, "given more than once")
			continue
		}
		seen[key] = true
		switch key {
		case "name":
			r.name = ps.str(key, v)
		case "code":
			r.code = ps.str(key, v)
		case "output_path":
			r.outputPath = ps.str(key, v)
		case "root":
			r.root = ps.str(key, v)
		case "compat":
			r.compat = ps.str(key, v)
		case "command":
			r.command, r.shell = ps.command(v)
		case "hyperparameters":
			r.hps = ps.hyperparameters(v)
		case "inputs":
			r.inputs = ps.channels(key, v)
		case "outputs":
			r.outputs = ps.channels(key, v)
		default:
			if s := suggest(key); s != "" {
				ps.addf(key, "unknown key (did you mean %s?)", s)
			} else {
				ps.addf(key, "unknown key (want %s)", strings.Join(specKeys(), ", "))
			}
		}
	}
	return ps.check(&r)
}

// specKeys are the keys a spec may have.
func specKeys() []string {
	return []string{"name", "command", "code", "hyperparameters", "inputs", "outputs", "output_path", "root", "compat"}
}

// suggest returns the known key within two edits of key, if any.
func suggest(key string) string {
	for _, k := range specKeys() {
		if editDistance(strings.ToLower(key), k) <= 2 {
			return k
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// str reads a string field; null or empty is "".
func (ps *parser) str(field string, n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		ps.addf(field, "want a string")
		return ""
	}
	if n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

func (ps *parser) command(n *yaml.Node) (argv []string, shell bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" || strings.TrimSpace(n.Value) == "" {
			return nil, false
		}
		return []string{n.Value}, true
	case yaml.SequenceNode:
		for i, it := range n.Content {
			it = resolve(it)
			ps.at(fmt.Sprintf("command[%d]", i), it)
			if it.Kind != yaml.ScalarNode {
				ps.addf(fmt.Sprintf("command[%d]", i), "want a string")
				continue
			}
			argv = append(argv, it.Value)
		}
		if len(argv) > 0 && argv[0] == "" {
			ps.addf("command[0]", "empty program name")
		}
		return argv, false
	default:
		ps.addf("command", "want a string (run with sh -c) or a list of strings (argv)")
		return nil, false
	}
}

func (ps *parser) hyperparameters(n *yaml.Node) []Hyperparameter {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		ps.addf("hyperparameters", "want a mapping of name to value")
		return nil
	}
	var hps []Hyperparameter
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		field := "hyperparameters." + k.Value
		ps.at(field, k)
		if k.Kind != yaml.ScalarNode {
			ps.at("hyperparameters", k)
			ps.addf("hyperparameters", "a name must be a string")
			continue
		}
		var val string
		switch v.Kind {
		case yaml.ScalarNode:
			// The text as written: 1e-5 stays 1e-5, true stays true.
			val = v.Value
		default:
			var b bytes.Buffer
			if err := writeJSON(&b, v); err != nil {
				ps.addf(field, "%v", err)
				continue
			}
			val = b.String()
		}
		hps = append(hps, Hyperparameter{Name: k.Value, Value: val})
		ps.hpLines = append(ps.hpLines, k.Line)
	}
	return hps
}

// writeJSON writes the compact JSON of a YAML value, keeping mapping order.
func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	n = resolve(n)
	switch n.Kind {
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, it := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, it); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("a map key must be a string")
			}
			writeJSONString(b, k.Value)
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
			return fmt.Errorf("%s has no JSON form", n.Value)
		}
		e := json.NewEncoder(b)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
	default:
		return fmt.Errorf("unsupported YAML value")
	}
	return nil
}

// writeJSONString writes s as a JSON string without HTML escaping.
func writeJSONString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

func (ps *parser) channels(field string, n *yaml.Node) []namedURI {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		ps.addf(field, "want a mapping of channel name to URI")
		return nil
	}
	var out []namedURI
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			ps.at(field, k)
			ps.addf(field, "a channel name must be a string")
			continue
		}
		f := field + "." + k.Value
		ps.at(f, k)
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
			ps.addf(f, "want a URI (oss://, s3://, hdfs://, nas:// or file://)")
			continue
		}
		out = append(out, namedURI{k.Value, v.Value})
	}
	return out
}

// Bounds on a job spec, so a hostile or broken one is refused at once
// instead of running for minutes and taking gigabytes. A real spec is a
// few KiB; hyperparameters must fit in the environment (128 KiB each).
const (
	// MaxSpecBytes bounds the size of a spec file.
	MaxSpecBytes = 1 << 20
	// maxSpecNodes bounds the YAML nodes of a spec with every alias
	// expanded: a 1 MiB spec of small scalars has fewer than 1<<20, while
	// nested aliases (a "billion laughs") expand exponentially.
	maxSpecNodes = 1 << 20
)

// errAliases is the problem reported for a spec whose aliases expand past
// maxSpecNodes.
var errAliases = fmt.Sprintf("YAML aliases expand to more than %d nodes (nested aliases, a \"billion laughs\"?); refusing the spec", maxSpecNodes)

// errTooLarge is the problem reported for a spec over MaxSpecBytes.
var errTooLarge = fmt.Sprintf("the spec is larger than 1 MiB (%d bytes); a job spec is a few KiB", MaxSpecBytes)

// readSpec reads the spec file at path, refusing one over MaxSpecBytes
// without reading it whole.
func readSpec(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%s: %s", path, errTooLarge)
	}
	return data, nil
}

// expandedSize counts the nodes under n with aliases expanded, stopping
// once the count passes limit. Each node's count is computed once (sizes
// memoizes them), so the walk is linear in the document, not in its
// expansion. An alias cycle counts as over the limit.
func expandedSize(n *yaml.Node, limit int, sizes map[*yaml.Node]int) int {
	if n == nil {
		return 0
	}
	if s, ok := sizes[n]; ok {
		if s < 0 { // still being counted: a cycle
			return limit + 1
		}
		return s
	}
	sizes[n] = -1
	total := 1
	if n.Kind == yaml.AliasNode {
		total += expandedSize(n.Alias, limit, sizes)
	}
	for _, c := range n.Content {
		if total > limit {
			break
		}
		total += expandedSize(c, limit, sizes)
	}
	total = min(total, limit+1)
	sizes[n] = total
	return total
}
