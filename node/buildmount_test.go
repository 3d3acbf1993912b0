package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mlfsd/mlfsd/node/nasroots"
)

// candidates are values tried, in order, for an option of each kind: the
// first that its row accepts and that differs from its default is used,
// so that every row the table gains is set to something of its own.
// "TIER" is replaced by a nas:// shared cache tier reached through a
// symbolic link (resolved against the NAS roots by a fresh mount).
var candidates = map[string][]string{
	"size":     {"3MiB", "7MiB", "1GiB", "0"},
	"int":      {"3", "7", "2"},
	"bool":     {"true", "false"},
	"duration": {"7s", "3m"},
	"string":   {"TIER", "1000:1000", "v1", "true", "when_required", "off", "x-test"},
	"strings":  {"nn1.test:8020,nn2.test:8020"},
}

// everyRowSet returns a mount request's options setting every mount-scope
// row of the table to a value other than its default (where its kind's
// candidates hold one), as Settings.WithMountOptions accepts them.
func everyRowSet(t *testing.T, tier string) map[string]string {
	t.Helper()
	def := Defaults()
	opts := map[string]string{}
	for _, o := range Table() {
		if o.Scope != ScopeMount {
			continue
		}
		cands, ok := candidates[o.Kind]
		if !ok {
			t.Fatalf("option --%s is of kind %q, which the test has no candidate values for: add some", o.Name, o.Kind)
		}
		for _, v := range cands {
			if v == "TIER" {
				v = tier
			}
			s := def
			if o.Set(&s, v) != nil || o.Get(&s) == o.Get(&def) {
				continue
			}
			opts[o.Name] = v
			break
		}
		if _, ok := opts[o.Name]; !ok {
			t.Logf("--%s keeps its default: no candidate of kind %s fits it", o.Name, o.Kind)
		}
	}
	if _, err := def.WithMountOptions(opts); err != nil {
		t.Fatalf("the options of every row together: %v", err)
	}
	return opts
}

// TestTakenOverMountRunsWithFreshOptions: a mount taken over by a new
// daemon runs with the settings a fresh mount of the same request gets,
// for every row of the options table (each set by the request to a value
// of its own), input and output alike: both are built by buildMount from
// mountSettings.
func TestTakenOverMountRunsWithFreshOptions(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"in", "out", "tier"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "tier"), filepath.Join(root, "tier-link")); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "tier.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := nasroots.Parse([]string{root + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	set := Defaults()
	set.Cache.Dir = ""
	set.Output.StagingDir = t.TempDir()
	set.Shared.KeyFile = keyFile
	newNode := func() *Node {
		n, err := New(t.Context(), Options{Settings: set, NASRoots: &policy})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	opts := everyRowSet(t, "nas://"+filepath.Join(root, "tier-link")+"/")

	old := newNode()
	defer old.Close(context.Background())
	reqs := []MountRequest{
		{URI: "nas://" + filepath.Join(root, "in") + "/", Target: t.TempDir(), ReadOnly: true, Options: opts},
		{URI: "nas://" + filepath.Join(root, "out") + "/", Target: t.TempDir(), Options: opts},
	}
	for _, req := range reqs {
		if _, err := old.Mount(t.Context(), req); err != nil {
			t.Fatalf("mount %s: %v", req.URI, err)
		}
	}
	h, err := old.FreezeForHandover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Abort()
	mounts := append([]HandoverMount(nil), h.Mounts...)
	for i := range mounts {
		// The old node keeps serving on its own fd (Abort thaws it);
		// the adoption, given up below, closes this copy.
		if mounts[i].Fd, err = unix.Dup(mounts[i].Fd); err != nil {
			t.Fatal(err)
		}
	}
	ad, err := newNode().Adopt(t.Context(), mounts)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Abort()
	if len(ad.items) != len(reqs) {
		t.Fatalf("adopted %d mounts, want %d", len(ad.items), len(reqs))
	}
	for _, it := range ad.items {
		taken := it.m
		old.mu.Lock()
		fresh := old.mounts[taken.req.Target]
		old.mu.Unlock()
		for _, o := range Table() {
			if f, a := o.Get(&fresh.set), o.Get(&taken.set); f != a {
				t.Errorf("%s: --%s is %q on the fresh mount, %q on the one taken over", taken.req.Target, o.Name, f, a)
			}
		}
		if fresh.set.Shared.URI == opts["shared-cache"] {
			t.Errorf("the tier %s was not resolved against the NAS roots", fresh.set.Shared.URI)
		}
	}
}
