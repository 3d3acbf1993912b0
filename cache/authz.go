package cache

import (
	"context"
	"fmt"
	"slices"

	"github.com/mlfsd/mlfsd/backends"
)

// Per-identity authorization of cached bytes. The cache is shared by every
// mount of a node, and an object is cached once for all of them (its ID
// names the store, not the client). So that bytes cross from one tenant to
// another only through the store's own authorization, a block is served to
// a view only once the view's principal (the fingerprint of its mount's
// credentials) was authorized by the store for that object version:
//
//   - a fetch that principal made itself authorizes it (the store answered
//     its ranged GET of that version), before the fetched blocks are
//     published, so a tenant reading its own data pays no extra request;
//   - otherwise (another principal fetched the blocks, or they were on
//     disk from an earlier run) the first read, or the open that offers
//     passthrough, asks the store: one Stat (a HEAD) through the view's
//     own backend, of that version. A refusal fails the read or open with
//     the backend's error (ErrPermission: EACCES) and no bytes are handed
//     over; a changed object fails with ErrVersionMismatch. Handles of
//     one principal asking at once share the HEAD.
//
// What was authorized is kept with the entry, in memory only (the
// principals are fingerprints of secrets: they are never written), so it
// goes with the entry's eviction and with a restart, after which the
// first read by each principal asks again.

// isAuthorized reports whether principal was authorized for e's version.
func (e *entry) isAuthorized(principal string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.authz, principal)
}

// authorize records that the store authorized principal for e's version.
func (e *entry) authorize(principal string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.authz, principal) {
		e.authz = append(e.authz, principal)
	}
}

// principal is the identity a source's reads are made as: its view's, or
// "" for Cache.Open.
func (s source) principal() string {
	if s.view == nil {
		return ""
	}
	return s.view.principal
}

// authorize makes sure the handle's principal may be served the entry's
// bytes, asking the store when no fetch of its own has shown it yet. Once
// it has, later reads of the handle cost one atomic load.
func (h *handle) authorize(ctx context.Context) error {
	if h.authorized.Load() {
		return nil
	}
	p := h.src.principal()
	if h.e.isAuthorized(p) {
		h.authorized.Store(true)
		return nil
	}
	// Handles of one principal opening one object at once (parallel
	// readers) share one HEAD.
	_, err, _ := h.c.authFlight.Do(h.e.id+"\x00"+p, func() (any, error) {
		h.c.stats.authRequests.Add(1)
		info, err := h.src.b.Stat(ctx, h.src.key)
		if err == nil && info.Version != h.src.version {
			err = backends.Wrap("read", h.src.key, backends.ErrVersionMismatch,
				fmt.Errorf("the store has version %q, the cache %q", info.Version, h.src.version))
		}
		if err != nil {
			h.c.stats.authDenied.Add(1)
			return nil, err
		}
		h.e.authorize(p)
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("authorize cached %q for this mount's credentials: %w", h.src.key, err)
	}
	h.authorized.Store(true)
	return nil
}
