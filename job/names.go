package job

import (
	"fmt"
	"strings"
)

// VarName returns the environment-variable form of a hyperparameter or
// channel name: every character outside [A-Za-z0-9_] becomes '_' (one '_'
// per character, not per byte), then the result is upper-cased.
func VarName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// maxChannelName is the longest channel name accepted.
const maxChannelName = 64

// checkChannelName reports what is wrong with a channel name, or nil.
// Channel names become directory names, so they are kept to a portable set.
func checkChannelName(name string) error {
	if name == "" {
		return fmt.Errorf("empty channel name")
	}
	if name == "." || name == ".." {
		return fmt.Errorf("invalid channel name %q: may not be \".\" or \"..\"", name)
	}
	if len(name) > maxChannelName {
		return fmt.Errorf("invalid channel name %q: %d characters, at most %d", name, len(name), maxChannelName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("invalid channel name %q: want 1-%d characters of A-Z a-z 0-9 . _ -", name, maxChannelName)
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell exactly as Python's shlex.quote
// does, so PAI_USER_ARGS matches what PAI's own tooling produces.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("_@%+=:,./-", c) >= 0) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}
