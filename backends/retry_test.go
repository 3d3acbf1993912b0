package backends

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRetry: transient errors are tried again, each retry told to
// onRetry, until success or the attempts run out; a permanent error or a
// cancelled context ends it at once.
func TestRetry(t *testing.T) {
	flaky, permanent := errors.New("flaky"), errors.New("permanent")
	o := RetryOptions{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond}.WithDefaults()
	transient := func(err error) bool { return errors.Is(err, flaky) }
	run := func(ctx context.Context, errs ...error) (error, int, []int) {
		tries := 0
		var retries []int
		err := Retry(ctx, o, transient, func(attempt int, err error) { retries = append(retries, attempt) }, func() error {
			tries++
			if tries <= len(errs) {
				return errs[tries-1]
			}
			return nil
		})
		return err, tries, retries
	}
	if err, tries, retries := run(t.Context(), flaky, flaky); err != nil || tries != 3 || len(retries) != 2 || retries[1] != 2 {
		t.Errorf("two flaky tries: %v after %d tries, retries %v", err, tries, retries)
	}
	if err, tries, _ := run(t.Context(), flaky, flaky, flaky, flaky, flaky); !errors.Is(err, flaky) || tries != 4 {
		t.Errorf("endless flaky tries: %v after %d tries, want 4", err, tries)
	}
	if err, tries, _ := run(t.Context(), flaky, permanent); !errors.Is(err, permanent) || tries != 2 {
		t.Errorf("a permanent error: %v after %d tries", err, tries)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err, tries, _ := run(ctx, flaky); !errors.Is(err, flaky) || tries != 1 {
		t.Errorf("cancelled: %v after %d tries", err, tries)
	}
}
