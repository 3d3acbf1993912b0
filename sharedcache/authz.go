package sharedcache

import (
	"fmt"

	"github.com/mlfsd/mlfsd/backends"
)

// The tier is shared by every node of a cluster and every mount of a node,
// whatever credentials they use, and a block names the object's store,
// key and version, not who read it. So a block from the tier is served
// through a source only once the store authorized that source's own
// credentials for the object version (each mount has its own Through):
//
//   - a ranged GET of the version that the source made (a miss, or the
//     blocks after one) authorizes it at no extra cost;
//   - before the first block served from the tier, if none did yet, one
//     Stat (a HEAD) of the source asks the store. A refusal is the read's
//     error (ErrPermission: EACCES) and no tier bytes are handed over; a
//     changed object is ErrVersionMismatch.
//
// What was authorized is remembered per source and version, in memory, up
// to maxAuthorized versions: past that it is forgotten at once (it costs a
// HEAD per version again, never a wrong answer).

// maxAuthorized bounds the versions remembered per source: about 100 MB
// with 64-byte keys, for a million files read through the tier.
const maxAuthorized = 1 << 20

func authzKey(key, version string) string { return key + "\x00" + version }

// isAuthorized reports whether the store authorized the source for version.
func (b *through) isAuthorized(key, version string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.authz[authzKey(key, version)]
	return ok
}

// authorized records that the store authorized the source for version.
func (b *through) authorized(key, version string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.authz) >= maxAuthorized {
		clear(b.authz)
	}
	b.authz[authzKey(key, version)] = struct{}{}
}

// mayServe reports, without asking the source, whether the reader's
// source was authorized for its version.
func (r *reader) mayServe() bool {
	if !r.authorizedOK && (r.t.opt.noAuthz || r.b.isAuthorized(r.key, r.version)) {
		r.authorizedOK = true
	}
	return r.authorizedOK
}

// authorize makes sure the reader's source may be served the tier's
// blocks of its version, asking the store when it has not yet shown so.
func (r *reader) authorize() error {
	if r.mayServe() {
		return nil
	}
	// Readers of one version at once (the node cache's parallel ranges)
	// share one HEAD.
	_, err, _ := r.b.flight.Do(authzKey(r.key, r.version), func() (any, error) {
		r.t.st.authRequests.Add(1)
		info, err := r.b.Backend.Stat(r.ctx, r.key)
		if err == nil && info.Version != r.version {
			err = backends.Wrap("read", r.key, backends.ErrVersionMismatch,
				fmt.Errorf("the store has version %q, the tier was asked for %q", info.Version, r.version))
		}
		if err != nil {
			r.t.st.authDenied.Add(1)
			return nil, err
		}
		r.b.authorized(r.key, r.version)
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("authorize shared-tier blocks of %q for this mount's credentials: %w", r.key, err)
	}
	r.authorizedOK = true
	return nil
}
