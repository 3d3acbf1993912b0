package oss

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
)

// RetryOptions bound the retries of one storage call.
//
// The aliyun SDK itself does not retry plain object calls (its RetryTimes
// only drives its resumable upload/download helpers, which we do not use),
// so this is the only retry layer: every request is retried here, with
// capped exponential backoff and full jitter, on 5xx, throttling (429/503),
// connection errors, truncated bodies and CRC mismatches, until MaxAttempts
// attempts or MaxElapsed time have been spent.
type RetryOptions = backends.RetryOptions

// retry runs fn until it succeeds or a permanent error, cancellation or the
// retry budget ends it.
func (b *Backend) retry(ctx context.Context, fn func() error) error {
	return backends.Retry(ctx, b.retryOpt, b.isTransient, func(attempt int, err error) {
		b.log.Debug("oss: retrying", "attempt", attempt, "err", err)
	}, fn)
}

// isTransient is the package's isTransient, and more when the keys are
// renewed: a request signed just before its key expired and refused
// after (SecurityTokenExpired) goes again with the renewed key, and a
// source that failed to renew (an STS or metadata hiccup) is asked again.
func (b *Backend) isTransient(err error) bool {
	if isTransient(err) {
		return true
	}
	var ce *CredentialsError
	return b.cred != nil && b.cred.refreshes() && (isExpiredToken(err) || errors.As(err, &ce))
}

// errTruncated marks a body that ended before its Content-Length.
var errTruncated = errors.New("response body truncated")

// statusOf returns the HTTP status of an SDK service error, or 0.
func statusOf(err error) (int, string) {
	var se alioss.ServiceError
	if errors.As(err, &se) {
		return se.StatusCode, se.Code
	}
	var pse *alioss.ServiceError
	if errors.As(err, &pse) {
		return pse.StatusCode, pse.Code
	}
	var ue alioss.UnexpectedStatusCodeError
	if errors.As(err, &ue) {
		return ue.Got(), ""
	}
	return 0, ""
}

// isTransient classifies an error as worth retrying.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if st, _ := statusOf(err); st != 0 {
		return st >= 500 || st == http.StatusTooManyRequests || st == http.StatusRequestTimeout
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false // a misspelt endpoint does not heal
	}
	var crcErr alioss.CRCCheckError
	var synErr *xml.SyntaxError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, errTruncated), errors.Is(err, errCRC), errors.As(err, &crcErr),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.As(err, &synErr), errors.As(err, &netErr), errors.As(err, &opErr):
		return true
	}
	return false
}

func (b *Backend) credSource() string {
	if b.cred == nil {
		return "nowhere"
	}
	return b.cred.source
}

// errCRC reports a whole-object read whose CRC64 differs from the server's.
var errCRC = errors.New("CRC64 of the data read differs from the object's x-oss-hash-crc64ecma")

// wrapErr turns an SDK error into a backends error wrapping the sentinel
// that applies, with a message that says what to fix where one is known.
func (b *Backend) wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var done *backends.OpError
	if errors.As(err, &done) {
		return err // already classified
	}
	st, code := statusOf(err)
	if code != "" {
		err = codedError{code: code, err: err}
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return backends.Wrap(op, key, nil, err)
	case code == "NoSuchBucket":
		return backends.Wrap(op, key, backends.ErrNotExist, fmt.Errorf("bucket %q does not exist at endpoint %s (check the bucket in the URI and --oss-endpoint / OSS_ENDPOINT): %w", b.bucketName, b.endpointHost, err))
	case st == http.StatusForbidden || st == http.StatusUnauthorized:
		return backends.Wrap(op, key, backends.ErrPermission, fmt.Errorf("OSS refused access to bucket %q (%s) to the key from %s: check that source, and that its key may access the bucket: %w", b.bucketName, code, b.credSource(), err))
	case st == http.StatusNotFound:
		return backends.Wrap(op, key, backends.ErrNotExist, err)
	case st == http.StatusPreconditionFailed:
		return backends.Wrap(op, key, backends.ErrVersionMismatch, err)
	case st == http.StatusConflict:
		return backends.Wrap(op, key, backends.ErrExist, err)
	case st == http.StatusBadRequest:
		return backends.Wrap(op, key, backends.ErrInvalid, err)
	case isTransient(err):
		return backends.Wrap(op, key, backends.ErrTransient, err)
	}
	return backends.Wrap(op, key, nil, err)
}

// codedError carries OSS's error code to backends.StoreCode (the SDK's
// ServiceError has it as a field, which StoreCode cannot name).
type codedError struct {
	code string
	err  error
}

func (e codedError) Error() string { return e.err.Error() }

func (e codedError) Unwrap() error { return e.err }

// ErrorCode is OSS's code for the failure ("NoSuchKey", "AccessDenied").
func (e codedError) ErrorCode() string { return e.code }
