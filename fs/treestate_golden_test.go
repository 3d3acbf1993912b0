package fs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/mlfsd/mlfsd/internal/goldenjson"
)

// TestTreeStateGolden: the trees' own state in each handover protocol's
// golden payload (handover/testdata; Snapshot.Tree, which package
// handover carries unread) comes back under the same names once decoded
// by today's trees and encoded again: exactly in the newest protocol,
// with nothing lost in older ones.
func TestTreeStateGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "handover", "testdata", "protocol-*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden handover payloads: %v", err)
	}
	sort.Slice(files, func(i, j int) bool {
		return len(files[i]) < len(files[j]) || len(files[i]) == len(files[j]) && files[i] < files[j]
	})
	for i, f := range files {
		newest := i == len(files)-1
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var offer struct {
			Mounts []struct {
				Request struct {
					ReadOnly bool `json:"ReadOnly"`
				} `json:"request"`
				Snapshot struct {
					Tree json.RawMessage `json:"tree"`
				} `json:"snapshot"`
			} `json:"mounts"`
		}
		if err := json.Unmarshal(raw, &offer); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for j, m := range offer.Mounts {
			if len(m.Snapshot.Tree) == 0 {
				t.Fatalf("%s: mount %d has no tree state", f, j)
			}
			var got []byte
			if m.Request.ReadOnly {
				var st inputState
				if err := json.Unmarshal(m.Snapshot.Tree, &st); err != nil {
					t.Fatalf("%s: mount %d: %v", f, j, err)
				}
				got, err = json.Marshal(st)
			} else {
				var st outputState
				if err := json.Unmarshal(m.Snapshot.Tree, &st); err != nil {
					t.Fatalf("%s: mount %d: %v", f, j, err)
				}
				got, err = json.Marshal(st)
			}
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := goldenjson.Diff(m.Snapshot.Tree, got, newest)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("%s: mount %d's tree: %s", f, j, d)
			}
		}
	}
}
