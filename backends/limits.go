package backends

import (
	"errors"
	"fmt"
)

// ErrNameTooLong: a name is longer than the store accepts (ENAMETOOLONG).
var ErrNameTooLong = errors.New("file name too long")

// NameLimiter is implemented by backends whose names are bounded: a file
// the store would refuse must be refused at create, not found out at
// upload. Optional, discovered by type assertion.
type NameLimiter interface {
	// NameLimits returns the longest path component and the longest key
	// (relative to the backend's root) the store accepts, in bytes; 0
	// means no limit.
	NameLimits() (component, key int)
}

// CheckName reports, wrapping ErrNameTooLong, a key b cannot store.
func CheckName(b Backend, op, key string) error {
	l, ok := As[NameLimiter](b)
	if !ok {
		return nil
	}
	comp, max := l.NameLimits()
	if max > 0 && len(key) > max {
		return Wrap(op, key, ErrNameTooLong, fmt.Errorf("the path is %d bytes, the store takes at most %d", len(key), max))
	}
	if comp > 0 {
		start := 0
		for i := 0; i <= len(key); i++ {
			if i == len(key) || key[i] == '/' {
				if i-start > comp {
					return Wrap(op, key, ErrNameTooLong, fmt.Errorf("the name %.40q... is %d bytes, the store takes at most %d", key[start:i], i-start, comp))
				}
				start = i + 1
			}
		}
	}
	return nil
}
