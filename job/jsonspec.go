package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"gopkg.in/yaml.v3"
)

// looksLikeJSON reports whether a spec is a JSON document. JSON is mostly
// YAML, but not entirely (YAML rejects the \/ escape and lone surrogates),
// so JSON specs are read with encoding/json and turned into the same tree.
func looksLikeJSON(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && t[0] == '{'
}

// jsonToNode parses a JSON document into a YAML node tree, keeping key
// order, the literal text of numbers (1e-5 stays 1e-5) and the line of
// every key and value, so problems in a JSON spec name their line too.
func jsonToNode(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var newlines []int // offsets of the '\n' bytes
	for i, c := range data {
		if c == '\n' {
			newlines = append(newlines, i)
		}
	}
	j := jsonReader{dec: dec, newlines: newlines}
	n, err := j.value()
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the top-level JSON value (offset %d)", dec.InputOffset())
	}
	return n, nil
}

// jsonReader turns decoder tokens into nodes that carry their line.
type jsonReader struct {
	dec      *json.Decoder
	newlines []int
}

// line is the line of the token just read: the one its last byte is on
// (a JSON token never spans lines).
func (j *jsonReader) line() int {
	end := int(j.dec.InputOffset()) - 1
	return 1 + sort.SearchInts(j.newlines, end)
}

func (j *jsonReader) value() (*yaml.Node, error) {
	dec := j.dec
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("offset %d: unexpected end of the document", dec.InputOffset())
	} else if err != nil {
		return nil, fmt.Errorf("offset %d: %w", dec.InputOffset(), err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: j.line()}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("offset %d: %w", dec.InputOffset(), err)
				}
				kn := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.(string), Line: j.line()}
				v, err := j.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, kn, v)
			}
			return n, closing(dec)
		case '[':
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: j.line()}
			for dec.More() {
				v, err := j.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			return n, closing(dec)
		}
		return nil, fmt.Errorf("offset %d: unexpected %v", dec.InputOffset(), t)
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t, Line: j.line()}, nil
	case json.Number:
		tag := "!!int"
		if bytes.ContainsAny([]byte(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: t.String(), Line: j.line()}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(t), Line: j.line()}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: j.line()}, nil
	}
	return nil, fmt.Errorf("offset %d: unexpected token %v", dec.InputOffset(), tok)
}

// closing reads the '}' or ']' that ends an object or array.
func closing(dec *json.Decoder) error {
	_, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("offset %d: unexpected end of the document (a '}' or ']' is missing)", dec.InputOffset())
	}
	return err
}
