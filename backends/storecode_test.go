package backends

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

type apiErr struct{ code string } // as smithy.APIError

func (e apiErr) Error() string     { return "api error " + e.code }
func (e apiErr) ErrorCode() string { return e.code }

type remoteErr struct{ class string } // as colinmarc/hdfs's Error

func (e remoteErr) Error() string     { return "remote " + e.class }
func (e remoteErr) Exception() string { return e.class }

// TestStoreCode: the store's own code is found under the wrapping a
// backend adds (OpError, sentinels, fmt's %w), for each kind of store.
func TestStoreCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{Wrap("read", "k", ErrNotExist, apiErr{"NoSuchKey"}), "NoSuchKey"},
		{Wrap("list", "", ErrTransient, fmt.Errorf("after 3 attempts: %w", apiErr{"SlowDown"})), "SlowDown"},
		{Wrap("stat", "k", ErrTransient, remoteErr{"org.apache.hadoop.hdfs.server.namenode.SafeModeException"}), "SafeModeException"},
		{Wrap("stat", "k", ErrNotExist, &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}), "ENOENT"},
		{Wrap("read", "k", ErrTransient, errors.New("connection reset by peer")), ""},
	} {
		if got := StoreCode(c.err); got != c.want {
			t.Errorf("StoreCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
