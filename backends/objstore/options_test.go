package objstore

import (
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

type transfer struct {
	threshold, part int64
	conc, staged    int
	connect         time.Duration
	retry           backends.RetryOptions
}

func (x *transfer) ptrs() Transfer {
	return Transfer{&x.threshold, &x.part, &x.conc, &x.staged, &x.connect, &x.retry}
}

func TestApplyDefaults(t *testing.T) {
	var x transfer
	if err := (Store{Name: "OSS", MinPartSize: 100 << 10, MinPartSizeText: "100 KiB"}).Apply(x.ptrs()); err != nil {
		t.Fatal(err)
	}
	want := transfer{DefaultMultipartThreshold, DefaultPartSize, DefaultConcurrency, DefaultStagedConcurrency,
		DefaultConnectTimeout, backends.RetryOptions{}.WithDefaults()}
	if x != want {
		t.Errorf("defaults %+v, want %+v", x, want)
	}
	// Values given are kept.
	x = transfer{threshold: 1, part: 6 << 20, conc: 2, staged: 3, connect: time.Second, retry: backends.RetryOptions{MaxAttempts: 2}}
	if err := (Store{Name: "S3", MinPartSize: 5 << 20, MinPartSizeText: "5 MiB"}).Apply(x.ptrs()); err != nil {
		t.Fatal(err)
	}
	if x.threshold != 1 || x.part != 6<<20 || x.conc != 2 || x.staged != 3 || x.connect != time.Second || x.retry.MaxAttempts != 2 {
		t.Errorf("given values changed: %+v", x)
	}
}

// TestApplyRefuses pins the messages: they name the store, the option,
// the value and what is accepted (node's and the backends' tests rely on
// them).
func TestApplyRefuses(t *testing.T) {
	oss := Store{Name: "OSS", MinPartSize: 100 << 10, MinPartSizeText: "100 KiB"}
	s3 := Store{Name: "S3", MinPartSize: 5 << 20, MinPartSizeText: "5 MiB"}
	for _, c := range []struct {
		s    Store
		bad  func(*transfer)
		want string
	}{
		{oss, func(x *transfer) { x.part = 1 << 10 }, "OSS part size 1024: want 100 KiB to 5 GiB"},
		{s3, func(x *transfer) { x.part = 1 << 20 }, "S3 part size 1048576: want 5 MiB to 5 GiB"},
		{s3, func(x *transfer) { x.part = MaxPartSize + 1 }, "S3 part size 5368709121: want 5 MiB to 5 GiB"},
		{oss, func(x *transfer) { x.threshold = -1 }, "OSS multipart threshold -1: want 0 to 5 GiB"},
		{oss, func(x *transfer) { x.conc = 257 }, "OSS upload concurrency 257: want 1 to 256"},
		{s3, func(x *transfer) { x.staged = -2 }, "S3 staged upload concurrency -2: want 1 to 256"},
		{oss, func(x *transfer) { x.connect = -time.Second }, "OSS connect timeout -1s: want a positive duration"},
	} {
		var x transfer
		c.bad(&x)
		err := c.s.Apply(x.ptrs())
		if err == nil || err.Error() != c.want {
			t.Errorf("Apply = %v, want %q", err, c.want)
		}
	}
}
