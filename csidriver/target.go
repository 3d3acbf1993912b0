package csidriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/node/nasroots"
)

// DefaultKubeletRoot is where the kubelet keeps pods' volumes; publish
// targets lie under it.
const DefaultKubeletRoot = "/var/lib/kubelet"

// checkTarget returns the cleaned target path of a publish or unpublish
// if it lies strictly under the kubelet root, its parent resolved (links
// followed) before the check; a path with a ".." element, a relative path
// and a target that is itself a symbolic link are refused. The error says
// what is wrong, for an InvalidArgument answer.
func (d *Driver) checkTarget(target string) (string, error) {
	if target == "" {
		return "", errors.New("target_path is required")
	}
	if !filepath.IsAbs(target) {
		return "", fmt.Errorf("target_path %q: must be absolute", target)
	}
	for _, e := range strings.Split(target, "/") {
		if e == ".." {
			return "", fmt.Errorf("target_path %q: must not contain '..'", target)
		}
	}
	clean := filepath.Clean(target)
	parent, err := nasroots.Resolve(filepath.Dir(clean))
	if err != nil {
		return "", fmt.Errorf("target_path %q: %v", target, err)
	}
	resolved := filepath.Join(parent, filepath.Base(clean))
	root := d.kubeletRoot
	if !strings.HasPrefix(resolved, strings.TrimSuffix(root, "/")+"/") {
		return "", fmt.Errorf("target_path %q: not under the kubelet root %s (the plugin's --kubelet-root)", target, root)
	}
	if fi, err := os.Lstat(resolved); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return "", fmt.Errorf("target_path %q: is a symbolic link", target)
	}
	return resolved, nil
}
