package oss

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/objstore"
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

// rules are OSS's part of the error classification shared with s3.
var rules = objstore.Rules{
	Status: statusOf,
	Retryable: func(err error) bool {
		var crcErr alioss.CRCCheckError
		var synErr *xml.SyntaxError
		return errors.Is(err, errTruncated) || errors.Is(err, errCRC) ||
			errors.As(err, &crcErr) || errors.As(err, &synErr)
	},
}

// isTransient classifies an error as worth retrying.
func isTransient(err error) bool { return rules.Transient(err) }

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
	// The code goes along for backends.StoreCode (metrics by error code),
	// unless err was classified already.
	var done *backends.OpError
	if !errors.As(err, &done) {
		if _, code := statusOf(err); code != "" {
			err = codedError{code: code, err: err}
		}
	}
	return rules.Wrap(op, key, err, func(k objstore.Kind, err error) error {
		switch k {
		case objstore.NoBucket:
			return fmt.Errorf("bucket %q does not exist at endpoint %s (check the bucket in the URI and --oss-endpoint / OSS_ENDPOINT): %w", b.bucketName, b.endpointHost, err)
		case objstore.Denied:
			_, code := statusOf(err)
			return fmt.Errorf("OSS refused access to bucket %q (%s) to the key from %s: check that source, and that its key may access the bucket: %w", b.bucketName, code, b.credSource(), err)
		}
		return nil
	})
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
