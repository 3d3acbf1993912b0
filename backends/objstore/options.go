package objstore

import (
	"fmt"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Defaults and bounds of the transfer options OSS and S3 share. The
// backends fill and check their Options with them (Store.Apply), and
// node's options table takes its flags' defaults and bounds from them, so
// a flag, a zero Options field and an API request mean the same.
const (
	// DefaultMultipartThreshold: writes larger than this use a multipart
	// upload, smaller ones are one PUT.
	DefaultMultipartThreshold = 16 << 20
	// DefaultPartSize is the size of multipart parts.
	DefaultPartSize = 8 << 20
	// MaxPartSize bounds a part and the multipart threshold (both stores
	// take parts of at most 5 GiB).
	MaxPartSize = 5 << 30
	// MaxParts is both stores' limit on the parts of one upload.
	MaxParts = 10000
	// DefaultConcurrency is the parts of one streaming write uploaded in
	// parallel, each held in memory.
	DefaultConcurrency = 4
	// DefaultStagedConcurrency is the parts of one staged file uploaded
	// in parallel, each read from the staging disk.
	DefaultStagedConcurrency = 16
	// MaxConcurrency bounds both concurrencies.
	MaxConcurrency = 256
	// DefaultConnectTimeout bounds the first contact with a store.
	DefaultConnectTimeout = 10 * time.Second
)

// Store is one object store's part of the options' validation.
type Store struct {
	// Name begins every error message ("OSS", "S3").
	Name string
	// MinPartSize is the smallest part the store takes (but the last).
	MinPartSize int64
	// MinPartSizeText is MinPartSize as messages say it ("100 KiB").
	MinPartSizeText string
}

// Transfer points at the fields of a backend's Options that every object
// store has, so one function fills and checks them all.
type Transfer struct {
	MultipartThreshold *int64
	PartSize           *int64
	Concurrency        *int
	StagedConcurrency  *int
	ConnectTimeout     *time.Duration
	Retry              *backends.RetryOptions
}

// Apply fills the zero fields of t with their defaults, then checks them:
// the error names the store, the option, its value and what is accepted.
func (s Store) Apply(t Transfer) error {
	if *t.MultipartThreshold == 0 {
		*t.MultipartThreshold = DefaultMultipartThreshold
	}
	if *t.PartSize == 0 {
		*t.PartSize = DefaultPartSize
	}
	if *t.Concurrency == 0 {
		*t.Concurrency = DefaultConcurrency
	}
	if *t.StagedConcurrency == 0 {
		*t.StagedConcurrency = DefaultStagedConcurrency
	}
	if *t.ConnectTimeout == 0 {
		*t.ConnectTimeout = DefaultConnectTimeout
	}
	switch {
	case *t.ConnectTimeout < 0:
		return fmt.Errorf("%s connect timeout %v: want a positive duration", s.Name, *t.ConnectTimeout)
	case *t.PartSize < s.MinPartSize || *t.PartSize > MaxPartSize:
		return fmt.Errorf("%s part size %d: want %s to 5 GiB", s.Name, *t.PartSize, s.MinPartSizeText)
	case *t.MultipartThreshold < 0 || *t.MultipartThreshold > MaxPartSize:
		return fmt.Errorf("%s multipart threshold %d: want 0 to 5 GiB", s.Name, *t.MultipartThreshold)
	case *t.Concurrency < 1 || *t.Concurrency > MaxConcurrency:
		return fmt.Errorf("%s upload concurrency %d: want 1 to %d", s.Name, *t.Concurrency, MaxConcurrency)
	case *t.StagedConcurrency < 1 || *t.StagedConcurrency > MaxConcurrency:
		return fmt.Errorf("%s staged upload concurrency %d: want 1 to %d", s.Name, *t.StagedConcurrency, MaxConcurrency)
	}
	*t.Retry = t.Retry.WithDefaults()
	return nil
}
