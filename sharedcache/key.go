package sharedcache

import (
	"bytes"
	"fmt"
	"os"
)

// MinKeyLen is the shortest MAC key a tier accepts.
const MinKeyLen = 16

// LoadKey reads the tier's MAC key from path: the file's bytes, less
// surrounding white space (a Kubernetes secret written by hand often ends
// in a newline). Errors name the file, never its content.
func LoadKey(path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("no key file given")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the shared cache key: %w", err)
	}
	key := bytes.Clone(bytes.TrimSpace(b))
	clear(b) // one copy of the secret in memory, not two
	switch {
	case len(key) == 0:
		return nil, fmt.Errorf("shared cache key file %s is empty", path)
	case len(key) < MinKeyLen:
		return nil, fmt.Errorf("shared cache key file %s holds %d bytes; give at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)", path, len(key), MinKeyLen, path)
	}
	return key, nil
}
