package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/objstore"
)

// RetryOptions bound the retries of one storage call.
//
// The SDK's own retryer is off (aws.NopRetryer): every request is retried
// here, as the oss backend does, with capped exponential backoff and full
// jitter, on 5xx, throttling (429, 503 SlowDown), timeouts, connection
// errors and truncated bodies, until MaxAttempts attempts or MaxElapsed
// time have been spent. One layer means one budget, and a read that fails
// mid-body resumes from where it stopped rather than from the start.
type RetryOptions = backends.RetryOptions

// retry runs fn until it succeeds or a permanent error, cancellation or the
// retry budget ends it.
func (b *Backend) retry(ctx context.Context, fn func() error) error {
	return backends.Retry(ctx, b.opt.Retry, b.isTransient, func(attempt int, err error) {
		b.log.Debug("s3: retrying", "attempt", attempt, "err", err)
	}, fn)
}

// isTransient is the package's isTransient, and a refusal of an expired
// session key too: the cached key is dropped, so the retry signs with a
// renewed one (a request signed just before the key expired and checked
// just after, or a key the store expired early).
func (b *Backend) isTransient(err error) bool {
	if isTransient(err) {
		return true
	}
	if !isExpiredToken(err) {
		return false
	}
	if c, ok := b.creds.(*aws.CredentialsCache); ok {
		c.Invalidate()
		return true
	}
	return false
}

// errTruncated marks a response that ended before it should have.
var errTruncated = errors.New("response truncated")

// statusOf returns the HTTP status and the S3 error code of an SDK error
// (0 and "" when the request got no answer).
func statusOf(err error) (int, string) {
	st := 0
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		st = re.HTTPStatusCode()
	}
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return st, code
}

// rules are S3's part of the error classification shared with oss.
var rules = objstore.Rules{
	Status: statusOf,
	// ConditionalRequestConflict (409): a conditional write raced another
	// change of the key; S3 asks for a retry, which the condition then
	// decides.
	RetryCodes: []string{"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "ConditionalRequestConflict"},
	// Signed for the wrong region, or a bucket of another region.
	RegionCodes:     []string{"AuthorizationHeaderMalformed", "PermanentRedirect"},
	RegionStatuses:  []int{http.StatusMovedPermanently},
	InvalidStatuses: []int{http.StatusRequestedRangeNotSatisfiable},
	RetryTimeouts:   true,
	Retryable: func(err error) bool {
		var deserErr *smithy.DeserializationError
		var se *smithyhttp.RequestSendError
		return errors.Is(err, errTruncated) || errors.As(err, &deserErr) || errors.As(err, &se)
	},
}

// isTransient classifies an error as worth retrying. The transport's own
// timeouts (no response headers in time, a connection idle past
// ResponseTimeout) are; they also match context.DeadlineExceeded, as the
// caller's deadline does, which the retrier tells apart by looking at the
// caller's context.
func isTransient(err error) bool { return rules.Transient(err) }

// wrapErr turns an SDK error into a backends error wrapping the sentinel
// that applies, with a message that says what to fix where one is known.
func (b *Backend) wrapErr(op, key string, err error) error {
	return rules.Wrap(op, key, err, func(k objstore.Kind, err error) error {
		switch k {
		case objstore.NoBucket:
			return fmt.Errorf("bucket %q does not exist at %s (check the bucket in the URI and the endpoint: endpoint= in the URI, --s3-endpoint or AWS_ENDPOINT_URL): %w", b.bucket, b.where(), err)
		case objstore.WrongRegion:
			return fmt.Errorf("bucket %q at %s is not in region %s: set region= in the URI, --s3-region or AWS_REGION: %w", b.bucket, b.where(), b.ep.region, err)
		case objstore.Denied:
			_, code := statusOf(err)
			return fmt.Errorf("S3 refused access to bucket %q at %s (%s): the keys come from %s: check that source, the region, and that its key may access the bucket: %w", b.bucket, b.where(), code, b.credSource, err)
		}
		return nil
	})
}

// where names the endpoint for error messages.
func (b *Backend) where() string {
	if b.ep.url == "" {
		return "AWS S3 (region " + b.ep.region + ")"
	}
	return b.ep.url
}
