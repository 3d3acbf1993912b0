package oss

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/backendtest"
)

// TestClassifySDKErrors: the adapter reads status and code out of each
// error type the aliyun SDK returns, and the shared rules give the
// sentinel the storage contract expects.
func TestClassifySDKErrors(t *testing.T) {
	b := &Backend{bucketName: "bkt", endpointHost: "oss-cn-hangzhou.aliyuncs.com"}
	for _, c := range []struct {
		name      string
		err       error
		sentinel  error
		transient bool
		says      string
	}{
		{"no bucket", alioss.ServiceError{StatusCode: 404, Code: "NoSuchBucket"}, backends.ErrNotExist, false, "--oss-endpoint"},
		{"no key", alioss.ServiceError{StatusCode: 404, Code: "NoSuchKey"}, backends.ErrNotExist, false, ""},
		{"no key by pointer", &alioss.ServiceError{StatusCode: 404, Code: "NoSuchKey"}, backends.ErrNotExist, false, ""},
		{"denied", alioss.ServiceError{StatusCode: 403, Code: "AccessDenied"}, backends.ErrPermission, false, "AccessDenied"},
		{"precondition", alioss.ServiceError{StatusCode: 412, Code: "PreconditionFailed"}, backends.ErrVersionMismatch, false, ""},
		{"exists", alioss.ServiceError{StatusCode: 409, Code: "FileAlreadyExists"}, backends.ErrExist, false, ""},
		{"bad request", alioss.ServiceError{StatusCode: 400, Code: "InvalidArgument"}, backends.ErrInvalid, false, ""},
		{"server", alioss.ServiceError{StatusCode: 503, Code: "ServiceUnavailable"}, backends.ErrTransient, true, ""},
		{"unexpected status", alioss.CheckRespCode(502, []int{200}), backends.ErrTransient, true, ""},
		{"unexpected 404", alioss.CheckRespCode(404, []int{200}), backends.ErrNotExist, false, ""},
		{"crc", alioss.CRCCheckError{}, backends.ErrTransient, true, ""},
		{"our crc", fmt.Errorf("read: %w", errCRC), backends.ErrTransient, true, ""},
		{"xml", fmt.Errorf("list: %w", &xml.SyntaxError{Msg: "unexpected EOF"}), backends.ErrTransient, true, ""},
		{"truncated", fmt.Errorf("HEAD: %w", errTruncated), backends.ErrTransient, true, ""},
		{"short body", io.ErrUnexpectedEOF, backends.ErrTransient, true, ""},
		{"moved is not a region error on OSS", alioss.ServiceError{StatusCode: http.StatusMovedPermanently}, nil, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := isTransient(c.err); got != c.transient {
				t.Errorf("isTransient(%v) = %v, want %v", c.err, got, c.transient)
			}
			err := b.wrapErr("stat", "k", c.err)
			backendtest.WantSentinel(t, err, c.sentinel)
			if !strings.Contains(err.Error(), c.err.Error()) {
				t.Errorf("wrapErr(%v) = %v lost its cause", c.err, err)
			}
			if c.says != "" && !strings.Contains(err.Error(), c.says) {
				t.Errorf("wrapErr(%v) = %q, want it to say %q", c.err, err, c.says)
			}
		})
	}
}
