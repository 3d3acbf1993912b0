package backends

import (
	"context"
	"math/rand/v2"
	"time"
)

// RetryOptions bound the retries of one storage call of an object-store
// backend (oss, s3): capped exponential backoff with full jitter, until
// MaxAttempts attempts or MaxElapsed time have been spent. Each backend
// is its store's only retry layer (its SDK's own is off or does not apply),
// so one call has one budget.
type RetryOptions struct {
	// MaxAttempts is the total number of tries (default 10).
	MaxAttempts int
	// BaseDelay is the first backoff (default 100ms); it doubles per try.
	BaseDelay time.Duration
	// MaxDelay caps one backoff (default 5s).
	MaxDelay time.Duration
	// MaxElapsed bounds the time spent retrying one call (default 2m).
	MaxElapsed time.Duration
}

// Defaults of RetryOptions that options tables show.
const (
	DefaultMaxAttempts = 10
	DefaultMaxElapsed  = 2 * time.Minute
)

// WithDefaults fills the zero fields with their defaults.
func (o RetryOptions) WithDefaults() RetryOptions {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 100 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 5 * time.Second
	}
	if o.MaxElapsed <= 0 {
		o.MaxElapsed = DefaultMaxElapsed
	}
	return o
}

// backoff returns the delay before try number attempt+1 (attempt >= 1):
// uniformly random in [d/2, d], d = min(BaseDelay*2^(attempt-1), MaxDelay).
func (o RetryOptions) backoff(attempt int) time.Duration {
	d := o.BaseDelay
	for i := 1; i < attempt && d < o.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, o.MaxDelay)
	return d/2 + rand.N(d/2+1)
}

// Retrier tracks the retries of one call.
type Retrier struct {
	o         RetryOptions
	transient func(error) bool
	start     time.Time
	attempt   int
}

// NewRetrier starts the retries of one call; transient tells the errors
// worth another try from permanent ones (each store has its own).
func NewRetrier(o RetryOptions, transient func(error) bool) *Retrier {
	return &Retrier{o: o, transient: transient, start: time.Now()}
}

// Attempt is the number of retries so far.
func (r *Retrier) Attempt() int { return r.attempt }

// Next reports whether err deserves another try, sleeping the backoff
// first. It returns false on permanent errors, on a cancelled ctx, and
// once the attempts or the time budget are spent.
func (r *Retrier) Next(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !r.transient(err) {
		return false
	}
	r.attempt++
	if r.attempt >= r.o.MaxAttempts {
		return false
	}
	d := r.o.backoff(r.attempt)
	if time.Since(r.start)+d > r.o.MaxElapsed {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Retry runs try until it succeeds, or a permanent error, a cancelled ctx
// or o's budget ends it, and returns the last error. onRetry, if set, is
// told of each retry (the backends log them).
func Retry(ctx context.Context, o RetryOptions, transient func(error) bool, onRetry func(attempt int, err error), try func() error) error {
	r := NewRetrier(o, transient)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !r.Next(ctx, err) {
			return err
		}
		if onRetry != nil {
			onRetry(r.Attempt(), err)
		}
	}
}
