package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
)

// answer is a store's reply as an adapter sees it.
type answer struct {
	status int
	code   string
}

func (a *answer) Error() string { return fmt.Sprintf("%d %s", a.status, a.code) }

func statusOfAnswer(err error) (int, string) {
	var a *answer
	if errors.As(err, &a) {
		return a.status, a.code
	}
	return 0, ""
}

var errSDK = errors.New("sdk: unparsable reply")

// timeoutErr is a transport timeout that also matches
// context.DeadlineExceeded, as net/http's are.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "awaiting headers: timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
func (timeoutErr) Unwrap() error   { return context.DeadlineExceeded }

// TestClassify pins the one mapping of store answers to the contract's
// sentinels, for a store with no rules of its own (oss) and one with
// codes, regions and transport timeouts (s3).
func TestClassify(t *testing.T) {
	plain := &Rules{Status: statusOfAnswer, Retryable: func(err error) bool { return errors.Is(err, errSDK) }}
	rich := &Rules{
		Status:          statusOfAnswer,
		RetryCodes:      []string{"SlowDown", "ConditionalRequestConflict"},
		RegionCodes:     []string{"PermanentRedirect"},
		RegionStatuses:  []int{301},
		InvalidStatuses: []int{416},
		RetryTimeouts:   true,
	}
	for _, c := range []struct {
		name        string
		err         error
		plain, rich Kind
	}{
		{"cancelled", fmt.Errorf("get: %w", context.Canceled), Cancelled, Cancelled},
		// context.DeadlineExceeded is itself a net.Error with Timeout():
		// with RetryTimeouts the retrier, which looks at the caller's
		// context, decides.
		{"deadline", context.DeadlineExceeded, Cancelled, Transient},
		{"transport timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, Cancelled, Transient},
		{"no bucket", &answer{404, "NoSuchBucket"}, NoBucket, NoBucket},
		{"no key", &answer{404, "NoSuchKey"}, NotFound, NotFound},
		{"forbidden", &answer{403, "AccessDenied"}, Denied, Denied},
		{"unauthorized", &answer{401, ""}, Denied, Denied},
		{"precondition", &answer{412, "PreconditionFailed"}, Mismatch, Mismatch},
		{"conflict", &answer{409, "FileAlreadyExists"}, Exists, Exists},
		{"retried conflict", &answer{409, "ConditionalRequestConflict"}, Exists, Exists},
		{"bad request", &answer{400, "InvalidArgument"}, Invalid, Invalid},
		{"range", &answer{416, "InvalidRange"}, Unknown, Invalid},
		{"region code", &answer{400, "PermanentRedirect"}, Invalid, WrongRegion},
		{"moved", &answer{301, ""}, Unknown, WrongRegion},
		{"server", &answer{500, "InternalError"}, Transient, Transient},
		{"throttled", &answer{429, ""}, Transient, Transient},
		{"request timeout", &answer{408, ""}, Transient, Transient},
		{"slow down code", &answer{200, "SlowDown"}, Unknown, Transient},
		{"method", &answer{405, ""}, Unknown, Unknown},
		{"reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient, Transient},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), Transient, Transient},
		{"short body", fmt.Errorf("body: %w", io.ErrUnexpectedEOF), Transient, Transient},
		{"dns typo", &net.DNSError{Name: "osss.example", IsNotFound: true}, Unknown, Unknown},
		{"sdk retryable", fmt.Errorf("decode: %w", errSDK), Transient, Unknown},
		{"other", errors.New("boom"), Unknown, Unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := plain.Classify(c.err); got != c.plain {
				t.Errorf("plain rules: %v is %v, want %v", c.err, got, c.plain)
			}
			if got := rich.Classify(c.err); got != c.rich {
				t.Errorf("rich rules: %v is %v, want %v", c.err, got, c.rich)
			}
		})
	}
}

func TestTransientRetryCodes(t *testing.T) {
	r := &Rules{Status: statusOfAnswer, RetryCodes: []string{"ConditionalRequestConflict"}}
	if !r.Transient(&answer{409, "ConditionalRequestConflict"}) {
		t.Error("a retry code is not transient")
	}
	if r.Transient(&answer{409, "BucketAlreadyExists"}) {
		t.Error("a 409 without a retry code is transient")
	}
	if r.Transient(nil) {
		t.Error("nil is transient")
	}
}

func TestWrap(t *testing.T) {
	r := &Rules{Status: statusOfAnswer}
	cause := &answer{403, "AccessDenied"}
	err := r.Wrap("stat", "k", cause, func(k Kind, err error) error {
		if k == Denied {
			return fmt.Errorf("the key from the environment may not read the bucket: %w", err)
		}
		return nil
	})
	var op *backends.OpError
	if !errors.As(err, &op) || op.Op != "stat" || op.Key != "k" {
		t.Fatalf("Wrap = %v, want an OpError of stat k", err)
	}
	if !errors.Is(err, backends.ErrPermission) || !errors.Is(err, cause) {
		t.Errorf("Wrap = %v: the sentinel or the cause is lost", err)
	}
	if again := r.Wrap("read", "other", err, nil); again != err {
		t.Errorf("an error already classified was wrapped again: %v", again)
	}
	if r.Wrap("stat", "k", nil, nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
	plain := r.Wrap("stat", "k", errors.New("boom"), nil)
	for _, s := range []error{backends.ErrNotExist, backends.ErrTransient, backends.ErrPermission, backends.ErrInvalid} {
		if errors.Is(plain, s) {
			t.Errorf("an unknown error got the sentinel %v", s)
		}
	}
}

func TestKindSentinel(t *testing.T) {
	want := map[Kind]error{
		Unknown: nil, Cancelled: nil, NoBucket: backends.ErrNotExist, WrongRegion: backends.ErrInvalid,
		Denied: backends.ErrPermission, NotFound: backends.ErrNotExist, Mismatch: backends.ErrVersionMismatch,
		Exists: backends.ErrExist, Invalid: backends.ErrInvalid, Transient: backends.ErrTransient,
	}
	for k, s := range want {
		if k.Sentinel() != s {
			t.Errorf("%v.Sentinel() = %v, want %v", k, k.Sentinel(), s)
		}
		if k.String() == "Kind(?)" {
			t.Errorf("kind %d has no name", k)
		}
	}
}
