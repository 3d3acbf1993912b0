package job

import (
	"strings"
	"testing"
)

// TestProblemLines: every problem names the line of the entry it is about,
// in YAML and in JSON specs, also when names are empty or repeated.
func TestProblemLines(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		want       []string
	}{
		{"yaml", "name: x\nhyperparameters:\n  a: 1\n  \"\": 2\n  b: 3\n  \"\": 4\n  a: 5\n  a: 6\ninputs:\n  \"\": nas:///x/\n", []string{
			"line 4: hyperparameters: empty name",
			"line 6: hyperparameters: empty name",
			"line 7: hyperparameters.a: given more than once",
			"line 8: hyperparameters.a: given more than once",
			"line 10: inputs: empty channel name",
		}},
		{"json", "{\"name\": \"x\",\n \"hyperparameters\": {\n  \"a\": 1,\n  \"\": 2,\n  \"a\": 3},\n \"inputs\": {\n  \"a b\": \"nas:///x/\"},\n \"bogus\": 1\n}\n", []string{
			"line 4: hyperparameters: empty name",
			"line 5: hyperparameters.a: given more than once",
			`line 7: inputs.a b: invalid channel name "a b"`,
			"line 8: bogus: unknown key",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.spec), Options{})
			se, ok := err.(*SpecError)
			if !ok {
				t.Fatalf("err = %v, want a *SpecError", err)
			}
			if len(se.Problems) != len(c.want) {
				t.Errorf("%d problems, want %d:\n%v", len(se.Problems), len(c.want), err)
			}
			for i, w := range c.want {
				if i < len(se.Problems) && !strings.HasPrefix(se.Problems[i].String(), w) {
					t.Errorf("problem %d = %q, want %q...", i, se.Problems[i], w)
				}
			}
		})
	}
}

// TestCompatOption: a bad compat option is the caller's mistake, reported
// before (and without blaming) the spec; "none" overrides the spec's.
func TestCompatOption(t *testing.T) {
	_, err := Parse([]byte("name: x\n"), Options{Compat: "azure"})
	if _, isSpec := err.(*SpecError); err == nil || isSpec || err.Error() != `compat option "azure": want "sagemaker" or "none"` {
		t.Errorf("err = %v (%T)", err, err)
	}
	p := mustParse(t, "name: x\ncompat: azure\n", Options{Compat: "none"})
	if p.Compat != "" {
		t.Errorf("compat = %q", p.Compat)
	}
	_, err = Parse([]byte("name: x\ncompat: azure\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), `line 2: compat: "azure"`) {
		t.Errorf("spec's own bad compat: err = %v", err)
	}
}
