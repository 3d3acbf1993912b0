package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestCommandLines parses every mlfsd command line of the
// Kubernetes manifests with the real command tree, so that a renamed or
// removed flag fails here rather than in a cluster.
func TestManifestCommandLines(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	seen := 0
	for _, f := range []string{"node.yaml", "controller.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var containers []struct {
				name string
				cmd  []string
			}
			switch meta.Kind {
			case "DaemonSet":
				var ds appsv1.DaemonSet
				if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, c := range ds.Spec.Template.Spec.Containers {
					containers = append(containers, struct {
						name string
						cmd  []string
					}{c.Name, c.Command})
				}
			case "Deployment":
				var d appsv1.Deployment
				if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					containers = append(containers, struct {
						name string
						cmd  []string
					}{c.Name, c.Command})
				}
			}
			for _, c := range containers {
				if len(c.cmd) == 0 || c.cmd[0] != "mlfsd" {
					continue
				}
				seen++
				a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
				root := newRootCmd(a)
				sub, rest, err := root.Find(c.cmd[1:])
				if err != nil || sub == root {
					t.Errorf("%s container %s: %v: no such subcommand (%v)", f, c.name, c.cmd, err)
					continue
				}
				if err := sub.ParseFlags(rest); err != nil {
					t.Errorf("%s container %s: %v: %v", f, c.name, c.cmd, err)
				}
				if args := sub.Flags().Args(); len(args) != 0 {
					t.Errorf("%s container %s: stray arguments %v", f, c.name, args)
				}
			}
		}
	}
	if seen < 3 {
		t.Fatalf("found %d mlfsd command lines in the manifests, want the daemon, the node plugin and the controller", seen)
	}
}
