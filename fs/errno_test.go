package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

func TestToErrno(t *testing.T) {
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{backends.Wrap("stat", "k", backends.ErrNotExist, errors.New("404")), syscall.ENOENT},
		{backends.Wrap("read", "k", backends.ErrPermission, nil), syscall.EACCES},
		{fmt.Errorf("x: %w", backends.ErrNoSpace), syscall.ENOSPC},
		{backends.ErrVersionMismatch, syscall.ESTALE},
		{backends.ErrUnsupported, syscall.ENOTSUP},
		{context.Canceled, syscall.EINTR},
		{fmt.Errorf("wrapped: %w", syscall.EXDEV), syscall.EXDEV},
		{errors.New("mystery"), syscall.EIO},
		{backends.Wrap("read", "k", backends.ErrTransient, errors.New("503")), syscall.EIO},
	}
	for _, c := range cases {
		if got := ToErrno(nil, "op", "p", c.err); got != c.want {
			t.Errorf("ToErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
