package s3

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
)

// answered is an S3 error as the SDK returns it: an API error with its
// code inside a response error with its HTTP status.
func answered(status int, code string) error {
	return &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      &smithy.GenericAPIError{Code: code, Message: code},
	}
}

// TestClassifySDKErrors: the adapter reads status and code out of each
// error type the AWS SDK returns, and the shared rules give the sentinel
// the storage contract expects.
func TestClassifySDKErrors(t *testing.T) {
	b := &Backend{bucket: "bkt", ep: endpoint{url: "http://minio:9000", region: "us-east-1"}, credSource: "the environment"}
	for _, c := range []struct {
		name      string
		err       error
		sentinel  error
		transient bool
		says      string
	}{
		{"no bucket", answered(404, "NoSuchBucket"), backends.ErrNotExist, false, "AWS_ENDPOINT_URL"},
		{"no key", answered(404, "NoSuchKey"), backends.ErrNotExist, false, ""},
		{"denied", answered(403, "AccessDenied"), backends.ErrPermission, false, "the environment"},
		{"wrong region", answered(400, "AuthorizationHeaderMalformed"), backends.ErrInvalid, false, "region="},
		{"moved", answered(301, ""), backends.ErrInvalid, false, "us-east-1"},
		{"precondition", answered(412, "PreconditionFailed"), backends.ErrVersionMismatch, false, ""},
		{"conflict", answered(409, "ConditionalRequestConflict"), backends.ErrExist, true, ""},
		{"range", answered(416, "InvalidRange"), backends.ErrInvalid, false, ""},
		{"slow down", answered(503, "SlowDown"), backends.ErrTransient, true, ""},
		{"internal", answered(500, "InternalError"), backends.ErrTransient, true, ""},
		{"code without status", &smithy.GenericAPIError{Code: "RequestTimeout"}, backends.ErrTransient, true, ""},
		{"unparsable", &smithy.DeserializationError{Err: errors.New("unexpected EOF")}, backends.ErrTransient, true, ""},
		{"not sent", &smithyhttp.RequestSendError{Err: errors.New("connection closed")}, backends.ErrTransient, true, ""},
		{"truncated", fmt.Errorf("GET: %w", errTruncated), backends.ErrTransient, true, ""},
		{"method", answered(405, "MethodNotAllowed"), nil, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := isTransient(c.err); got != c.transient {
				t.Errorf("isTransient(%v) = %v, want %v", c.err, got, c.transient)
			}
			err := b.wrapErr("stat", "k", c.err)
			backendtest.WantSentinel(t, err, c.sentinel)
			if !errors.Is(err, c.err) {
				t.Errorf("wrapErr(%v) = %v lost its cause", c.err, err)
			}
			if c.says != "" && !strings.Contains(err.Error(), c.says) {
				t.Errorf("wrapErr(%v) = %q, want it to say %q", c.err, err, c.says)
			}
		})
	}
}
