// Package goldenjson checks a wire format against golden fixtures: a
// fixture decoded into the types that read it and encoded again must come
// back as it was. A field renamed (or dropped) in the types loses its
// value on the way and fails the check.
package goldenjson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// Diff compares a fixture with what decoding and encoding it again gave.
// exact: got must equal the fixture (the current version of a format: a
// field added or renamed needs a new fixture, and a new version). Else
// every value of the fixture must be in got as it was, and got may hold
// more (an older version, read by today's types, which add fields). It
// returns the paths that differ, none when they agree.
func Diff(fixture, got []byte, exact bool) ([]string, error) {
	var want, have any
	if err := json.Unmarshal(fixture, &want); err != nil {
		return nil, fmt.Errorf("fixture: %w", err)
	}
	if err := json.Unmarshal(got, &have); err != nil {
		return nil, fmt.Errorf("re-encoded: %w", err)
	}
	var diffs []string
	diff("$", want, have, exact, &diffs)
	sort.Strings(diffs)
	return diffs, nil
}

func diff(path string, want, have any, exact bool, out *[]string) {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: want an object, got %v", path, have))
			return
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: lost (renamed or dropped?)", path, k))
				continue
			}
			diff(path+"."+k, wv, hv, exact, out)
		}
		if exact {
			for k := range h {
				if _, ok := w[k]; !ok {
					*out = append(*out, fmt.Sprintf("%s.%s: not in the fixture (a new or renamed field needs a new protocol version and fixture)", path, k))
				}
			}
		}
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			*out = append(*out, fmt.Sprintf("%s: want %d elements, got %v", path, len(w), have))
			return
		}
		for i := range w {
			diff(fmt.Sprintf("%s[%d]", path, i), w[i], h[i], exact, out)
		}
	default:
		if !reflect.DeepEqual(want, have) {
			*out = append(*out, fmt.Sprintf("%s: want %v, got %v", path, want, have))
		}
	}
}
