package job

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parseGuarded runs Parse, failing the test (instead of hanging the suite)
// if it has not returned after a generous bound. The bound is a hang guard,
// not a speed assertion: a bounded parse returns in milliseconds.
func parseGuarded(t *testing.T, data []byte) (*Plan, error) {
	t.Helper()
	type result struct {
		p   *Plan
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := Parse(data, Options{})
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		return r.p, r.err
	case <-time.After(2 * time.Minute):
		t.Fatalf("Parse did not return within 2 minutes (unbounded expansion?)")
		return nil, nil
	}
}

// billionLaughs is the classic alias bomb: 9 levels of 9 aliases, 9^9
// (387 million) strings once expanded, from under 1 KiB of YAML. The
// anchors are hyperparameters; where, when set, uses the last one again.
func billionLaughs(where string) string {
	var b strings.Builder
	b.WriteString("name: bomb\ncommand: [true]\nhyperparameters:\n  x0: &l0 [lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  x%d: &l%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString(where + "\n")
	return b.String()
}

func TestSpecAliasBombRefused(t *testing.T) {
	for _, where := range []string{
		"",
		"inputs: {a: *l9}",
		"outputs: *l9",
		"x-unknown: *l9",
	} {
		name := where
		if name == "" {
			name = "hyperparameters"
		}
		t.Run(name, func(t *testing.T) {
			_, err := parseGuarded(t, []byte(billionLaughs(where)))
			if err == nil {
				t.Fatal("alias bomb accepted")
			}
			if !strings.Contains(err.Error(), "aliases expand to more than") {
				t.Errorf("error does not name the limit: %v", err)
			}
		})
	}
}

// TestSpecAliasesWithinBounds: ordinary anchors and aliases still work.
func TestSpecAliasesWithinBounds(t *testing.T) {
	spec := `
name: anchors
command: [train]
hyperparameters:
  common: &common {lr: 0.1, layers: [1, 2, 3]}
  again: *common
inputs:
  train: &uri oss://bucket/train/
  also: *uri
`
	p, err := parseGuarded(t, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.HyperparametersJSON(); strings.Count(got, `{\"lr\":0.1,\"layers\":[1,2,3]}`) != 2 {
		t.Errorf("hyperparameters = %s", got)
	}
	if len(p.Inputs) != 2 || p.Inputs[1].URI.String() != "oss://bucket/train/" {
		t.Errorf("inputs = %+v", p.Inputs)
	}
}

func TestSpecSizeLimit(t *testing.T) {
	big := "name: big\ncommand: [true]\nhyperparameters:\n  pad: \"" + strings.Repeat("x", MaxSpecBytes) + "\"\n"
	for _, data := range []string{big, "{\"name\": \"" + strings.Repeat("x", MaxSpecBytes) + "\"}"} {
		_, err := parseGuarded(t, []byte(data))
		if err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
			t.Errorf("spec of %d bytes: err = %v, want it refused for its size", len(data), err)
		}
	}
	// Load refuses a big file without reading it whole.
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("Load(%d bytes): err = %v, want it refused for its size", len(big), err)
	}
}

// TestSpecDeepNestingRefused: nesting deep enough to exhaust a recursive
// walk is refused by the YAML and JSON readers.
func TestSpecDeepNestingRefused(t *testing.T) {
	const depth = 100000
	for _, data := range []string{
		"name: deep\nhyperparameters: {x: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}\n",
		`{"name": "deep", "hyperparameters": {"x": ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}}",
	} {
		if _, err := parseGuarded(t, []byte(data)); err == nil {
			t.Errorf("spec nested %d deep accepted", depth)
		}
	}
}

// TestSpecRefusesRelativeNASURI: nas:out/ once named the host's root.
func TestSpecRefusesRelativeNASURI(t *testing.T) {
	spec := "name: rel\ncommand: [true]\ninputs: {data: 'file:etc/'}\noutputs: {model: 'nas:out/'}\n"
	_, err := parseGuarded(t, []byte(spec))
	if err == nil {
		t.Fatal("relative NAS URIs accepted")
	}
	for _, want := range []string{`inputs.data: URI "file:etc/": want file:///abs/path/`, `outputs.model: URI "nas:out/": want nas:///abs/path/`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
