package cache

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoFUSEDependency keeps the read path free of go-fuse: the service
// layer, tools and benchmarks that wire a cache must not pull in the FUSE
// adapter, which is why the Source/Handle seam lives in this package.
func TestNoFUSEDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "go-fuse") || dep == "github.com/mlfsd/mlfsd/fs" {
			t.Errorf("package cache depends on %s; the read path must not depend on FUSE", dep)
		}
	}
}
