// Package objstore holds what the object-store backends (oss, s3) share
// beyond the storage contract: how a failed request is classified. Each
// backend keeps only the adapter that reads (HTTP status, store error
// code) out of its SDK's errors, and the messages that say what to fix.
package objstore

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
)

// Kind is what a failed request means to the storage contract.
type Kind int

// The kinds of failure, each mapped to at most one contract sentinel.
const (
	// Unknown failures carry no sentinel (EIO at the FUSE edge).
	Unknown Kind = iota
	// Cancelled is the caller's own context ending: no sentinel.
	Cancelled
	// NoBucket is a bucket that does not exist (ErrNotExist).
	NoBucket
	// WrongRegion is a request signed for another region than the
	// bucket's (ErrInvalid).
	WrongRegion
	// Denied is a refusal of the key (ErrPermission).
	Denied
	// NotFound is a missing key or upload (ErrNotExist).
	NotFound
	// Mismatch is a failed precondition (ErrVersionMismatch).
	Mismatch
	// Exists is a conflict with an existing object (ErrExist).
	Exists
	// Invalid is a request the store rejects as malformed (ErrInvalid).
	Invalid
	// Transient is a failure worth another try (ErrTransient).
	Transient
)

var kindNames = [...]string{"Unknown", "Cancelled", "NoBucket", "WrongRegion", "Denied", "NotFound", "Mismatch", "Exists", "Invalid", "Transient"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "Kind(?)"
	}
	return kindNames[k]
}

// Sentinel returns the contract's sentinel error for k, or nil.
func (k Kind) Sentinel() error {
	switch k {
	case NoBucket, NotFound:
		return backends.ErrNotExist
	case WrongRegion, Invalid:
		return backends.ErrInvalid
	case Denied:
		return backends.ErrPermission
	case Mismatch:
		return backends.ErrVersionMismatch
	case Exists:
		return backends.ErrExist
	case Transient:
		return backends.ErrTransient
	}
	return nil
}

// Rules are one store's part of the classification; everything else
// (statuses, connection errors, cancellation) is common to every store.
type Rules struct {
	// Status returns the HTTP status and the store's error code of an
	// SDK error: 0 and "" when the request got no answer.
	Status func(error) (status int, code string)
	// RetryCodes are error codes worth another try whatever their status
	// (S3's 409 ConditionalRequestConflict asks for a retry).
	RetryCodes []string
	// RegionCodes and RegionStatuses mark a request signed for the wrong
	// region or a bucket of another region.
	RegionCodes    []string
	RegionStatuses []int
	// InvalidStatuses are rejected as invalid besides 400.
	InvalidStatuses []int
	// RetryTimeouts makes a transport timeout (no response headers in
	// time, an idle connection) transient even when it also matches
	// context.DeadlineExceeded, as the caller's deadline does: the
	// retrier tells the two apart by looking at the caller's context.
	RetryTimeouts bool
	// Retryable reports the SDK's own error types worth another try
	// (a CRC mismatch, an unparsable or truncated response, a request
	// that could not be sent). It may be nil.
	Retryable func(error) bool
}

// Transient reports whether err is worth another try: 5xx, throttling
// (429), request timeouts (408), the store's RetryCodes, connection
// errors and truncated or unparsable answers; never the caller's
// cancellation nor a name that does not resolve.
func (r *Rules) Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if r.RetryTimeouts {
		var timeout net.Error
		if errors.As(err, &timeout) && timeout.Timeout() {
			return true
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	st, code := r.Status(err)
	if code != "" && slices.Contains(r.RetryCodes, code) {
		return true
	}
	if st != 0 {
		return st >= 500 || st == http.StatusTooManyRequests || st == http.StatusRequestTimeout
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false // a misspelt endpoint does not heal
	}
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.As(err, &netErr), errors.As(err, &opErr):
		return true
	}
	return r.Retryable != nil && r.Retryable(err)
}

// Classify tells what err means to the storage contract.
func (r *Rules) Classify(err error) Kind {
	if err == nil {
		return Unknown
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !r.Transient(err) {
		return Cancelled
	}
	st, code := r.Status(err)
	switch {
	case code == "NoSuchBucket":
		return NoBucket
	case code != "" && slices.Contains(r.RegionCodes, code), st != 0 && slices.Contains(r.RegionStatuses, st):
		return WrongRegion
	case st == http.StatusForbidden || st == http.StatusUnauthorized:
		return Denied
	case st == http.StatusNotFound:
		return NotFound
	case st == http.StatusPreconditionFailed:
		return Mismatch
	case st == http.StatusConflict:
		return Exists
	case st == http.StatusBadRequest, st != 0 && slices.Contains(r.InvalidStatuses, st):
		return Invalid
	case r.Transient(err):
		return Transient
	}
	return Unknown
}

// Wrap turns err into a backends error of op on key wrapping the sentinel
// of its kind. explain, when it returns non-nil for a kind, replaces the
// cause with a message that says what to fix (it must wrap err). An error
// already classified is returned as it is.
func (r *Rules) Wrap(op, key string, err error, explain func(Kind, error) error) error {
	if err == nil {
		return nil
	}
	var done *backends.OpError
	if errors.As(err, &done) {
		return err
	}
	k := r.Classify(err)
	cause := err
	if explain != nil {
		if e := explain(k, err); e != nil {
			cause = e
		}
	}
	return backends.Wrap(op, key, k.Sentinel(), cause)
}
