package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/cache"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// sharedTiers are the shared cache tiers the node's input mounts read
// through, one per tier URI, open until the node closes.
type sharedTiers struct {
	log *slog.Logger
	reg prometheus.Registerer

	mu    sync.Mutex
	tiers map[string]*sharedTier // GUARDED_BY(mu): by URI
}

type sharedTier struct {
	t   *sharedcache.Tier
	set SharedCacheSettings
}

func newSharedTiers(log *slog.Logger, reg prometheus.Registerer) *sharedTiers {
	return &sharedTiers{log: log, reg: reg, tiers: map[string]*sharedTier{}}
}

// through returns b read through the tier set names, or b itself when set
// names none. A tier whose store cannot be opened now is logged and left
// out: the mount reads from its source, as it would with the tier down.
func (s *sharedTiers) through(ctx context.Context, b backends.Backend, set Settings) (backends.Backend, error) {
	sh := set.Shared
	if sh.URI == "" {
		return b, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock() // held while opening: mounts naming a tier wait for one open
	if st, ok := s.tiers[sh.URI]; ok {
		if st.set != sh {
			return nil, fmt.Errorf("shared cache %s is open with size %s and timeout %v; a mount may not ask for size %s and timeout %v",
				sh.URI, FormatSize(st.set.MaxBytes), st.set.Timeout, FormatSize(sh.MaxBytes), sh.Timeout)
		}
		return st.t.Through(b), nil
	}
	key, err := tierKey(sh)
	if err != nil {
		// Not a store that is down: a node set up wrong. The mount
		// fails, saying what to give.
		return nil, err
	}
	t, err := openTier(ctx, sh, key, set.Backend, s.log)
	if err != nil {
		s.log.Warn("shared cache unavailable; this mount reads from its source", "shared_cache", sh.URI, "err", err)
		return b, nil
	}
	if err := s.reg.Register(t.Collector()); err != nil {
		t.Close()
		return nil, fmt.Errorf("shared cache %s metrics: %w", sh.URI, err)
	}
	s.tiers[sh.URI] = &sharedTier{t: t, set: sh}
	return t.Through(b), nil
}

// openTier opens the tier's store with few retries and short deadlines:
// the tier is worth using only while it answers faster than the source.
func openTier(ctx context.Context, sh SharedCacheSettings, key []byte, bopt all.Options, log *slog.Logger) (*sharedcache.Tier, error) {
	u, err := backends.ParseURI(sh.URI)
	if err != nil {
		return nil, err
	}
	bopt.OSS.Retry.MaxAttempts = 2
	bopt.OSS.Retry.MaxElapsed = 2 * sh.Timeout
	bopt.OSS.ConnectTimeout = min(max(2*sh.Timeout, time.Second), 10*time.Second)
	bopt.HDFS.Retries = 1
	// A block object is one PUT; the writer's buffer is one part, which it
	// allocates (and clears) whole: 8 MiB per 1 MiB block by default.
	bopt.OSS.PartSize = 2 << 20
	store, _, err := all.Open(ctx, u, bopt, log)
	if err != nil {
		return nil, err
	}
	t, err := sharedcache.New(store, sharedcache.Options{
		Key:       key,
		BlockSize: cache.DefaultOptions().BlockSize, // the node cache's: its reads map onto whole blocks
		MaxBytes:  sh.MaxBytes,
		Timeout:   sh.Timeout,
		Log:       log,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	return t, nil
}

// tierKey reads the MAC key of the tier sh names (every tier of the node
// has the one key: the cluster's).
func tierKey(sh SharedCacheSettings) ([]byte, error) {
	if sh.KeyFile == "" {
		return nil, fmt.Errorf("shared cache %s: no key: give --shared-cache-key-file, a file holding the secret every node of the cluster shares (e.g. a Kubernetes Secret mounted as a file; head -c 32 /dev/urandom | base64 makes one)", sh.URI)
	}
	key, err := sharedcache.LoadKey(sh.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--shared-cache-key-file: %w", err)
	}
	return key, nil
}

// close closes every tier.
func (s *sharedTiers) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for uri, st := range s.tiers {
		s.reg.Unregister(st.t.Collector())
		if err := st.t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing shared cache %s: %w", uri, err))
		}
		delete(s.tiers, uri)
	}
	return errors.Join(errs...)
}

// usage returns each tier's bytes (by the node's count) and what the node
// wrote to it, by dataset.
func (s *sharedTiers) usage() []SharedTierUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SharedTierUsage, 0, len(s.tiers))
	for uri, st := range s.tiers {
		out = append(out, SharedTierUsage{URI: uri, Bytes: st.t.Used(), WrittenBytes: st.t.WrittenBySource()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out
}

// tier returns the open tier of uri, nil if none ("" or not opened).
func (s *sharedTiers) tier(uri string) *sharedcache.Tier {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.tiers[uri]; ok {
		return st.t
	}
	return nil
}
