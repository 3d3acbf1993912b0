package goldenjson

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	fixture := `{"a":1,"b":{"c":"x","d":[1,2]}}`
	for _, c := range []struct {
		name, got string
		exact     bool
		want      string // a substring of the first diff; "" for none
	}{
		{"same", `{"b":{"d":[1,2],"c":"x"},"a":1}`, true, ""},
		{"renamed", `{"a":1,"b":{"C":"x","d":[1,2]}}`, false, "$.b.c: lost"},
		{"added exact", `{"a":1,"e":0,"b":{"c":"x","d":[1,2]}}`, true, "$.e: not in the fixture"},
		{"added older", `{"a":1,"e":0,"b":{"c":"x","d":[1,2]}}`, false, ""},
		{"changed", `{"a":2,"b":{"c":"x","d":[1,2]}}`, false, "$.a: want 1, got 2"},
		{"shorter", `{"a":1,"b":{"c":"x","d":[1]}}`, false, "$.b.d: want 2 elements"},
	} {
		diffs, err := Diff([]byte(fixture), []byte(c.got), c.exact)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want == "" && len(diffs) > 0:
			t.Errorf("%s: diffs %q, want none", c.name, diffs)
		case c.want != "" && (len(diffs) == 0 || !strings.Contains(diffs[0], c.want)):
			t.Errorf("%s: diffs %q, want %q", c.name, diffs, c.want)
		}
	}
}
