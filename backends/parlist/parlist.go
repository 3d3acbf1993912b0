// Package parlist lists one wide directory (or any prefix) of a backend in
// parallel. A store pages a listing one page after another: 100,000 keys in
// pages of 1,000 are 100 round trips in a row (4.9 s against an emulator
// with 20 ms to first byte). After the first page, the rest of the key
// space is cut into ranges at split points chosen from the names seen, and
// the ranges are listed at once, each from its split point
// (backends.ListOptions.StartAfter).
//
// # Why the result has no gaps and no duplicates, whatever the split points
//
// The contract promises that a listing that starts after s is a suffix of
// the whole listing, shorter for a larger s, and that an entry sorts at its
// Key or (a directory in an object store) at its Key and '/', never before
// its Key. A range (lo, hi] is listed from lo, page after page, until a
// page holds an entry whose Key is above hi (or the listing ends): pages
// are contiguous pieces of the listing, so by then every entry that sorts
// at or below hi has been seen, since it comes before one whose Key, and
// so place, lies above hi. The ranges' listings overlap only in the entries
// a range reads past its end, which are dropped as duplicates (an entry is
// its Key and kind: the listing never holds one twice). So the split points
// only decide the speed, never the result: a point between two entries
// that sort either way (a directory "a" as "a" or "a/" against the point
// "a-") or a store that ignored StartAfter (every range then reads from
// the start: its probes all find the same first entry, so it is never
// split) costs requests, not correctness. In a non-recursive listing split points
// hold no '/' after the prefix, so each lies wholly before or after every
// sub-directory's keys, and a store's folding of keys into common prefixes
// cannot depend on where a range starts.
//
// # How split points are chosen
//
// Names are arbitrary UTF-8 (or, on NAS and HDFS, arbitrary bytes), so a
// split point is built from what was seen rather than from an assumed
// alphabet: the runes that occur in the names of the page just read, put
// after the last name's first few runes at the depths where that page's
// names began to differ (and one or two shallower). For img_000000 ..
// img_000999 this gives img_001, img_002, ..., img_01, img_02, ...;
// for hexadecimal hashes 03, 04, ..., 1, 2, ...; for Japanese names the
// kanji seen. Split points are cut at rune boundaries, so they are valid
// UTF-8 wherever the names are. The page's density (its keys read as
// numbers whose digits are the runes seen at each position, scale.go)
// estimates how many entries lie between two points: only points a few
// pages apart are kept, since every range costs a page read past its end
// or a probe. Each kept point is then probed (a listing of one key after
// it): points that start an empty range are dropped. A range whose first
// page does not finish it is split again in the same way while fewer
// ranges than Options.Requests are being listed, so a skewed guess is
// corrected after one round trip; and a range estimated to end within a
// tenth of a page of its last key probes once instead of reading a whole
// page past its end.
package parlist

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/mlfsd/mlfsd/backends"
)

// Options tunes a parallel listing. The zero value is ready to use.
type Options struct {
	// Requests bounds the List calls in flight (default 16; OSS
	// answers a list request in one round trip, so 16 at once keep a
	// 20 ms link busy without flooding it).
	Requests int
	// MaxRanges bounds the ranges one listing is split into (default 512).
	MaxRanges int
	// Stats, if set, receives counts of what the listing did.
	Stats *Stats
}

// Stats counts the requests of one listing.
type Stats struct {
	Pages  int64 // full pages listed
	Probes int64 // one-key probes of split points
	Ranges int64 // ranges listed, the first included
}

const (
	defaultRequests  = 16
	defaultMaxRanges = 512
	// splitDepths is how many rune positions, from the one above where
	// the names of a page begin to differ towards the start, get split
	// points.
	splitDepths = 3
	// maxPoints bounds the split points probed after one page.
	maxPoints = 64
	// minRangePages: a range split off is likely to hold this many pages
	// at least, by the page's density (every range reads up to a page
	// past its end, or probes to learn it is done).
	minRangePages = 3
	// nearEnd: when a range is likely to end within this fraction of a
	// page after the last one, a one-key probe asks whether it did.
	nearEnd = 0.1
)

// List returns every entry under opt.Prefix (non-recursive or recursive,
// as opt asks, after opt.StartAfter if set; opt.Token is ignored) as one
// page with no NextToken: Objects sorted by Key (a file before a directory
// of the same key), Prefixes sorted. A listing that fits in one page costs
// that one request.
func List(ctx context.Context, b backends.Backend, opt backends.ListOptions, o Options) (backends.ListPage, error) {
	if o.Requests <= 0 {
		o.Requests = defaultRequests
	}
	if o.MaxRanges <= 0 {
		o.MaxRanges = defaultMaxRanges
	}
	opt.Token = ""
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &lister{
		ctx: ctx, cancel: cancel, b: b, opt: opt, o: o,
		sem:      make(chan struct{}, o.Requests),
		objs:     map[objID]backends.ObjectInfo{},
		prefixes: map[string]bool{},
	}
	l.ranges.Add(1)
	l.active.Add(1)
	l.wg.Add(1)
	go l.run(opt.StartAfter, "")
	l.wg.Wait()
	if o.Stats != nil {
		*o.Stats = Stats{Pages: l.pages.Load(), Probes: l.probes.Load(), Ranges: int64(l.ranges.Load())}
	}
	if l.err != nil {
		return backends.ListPage{}, l.err
	}
	var page backends.ListPage
	page.Objects = make([]backends.ObjectInfo, 0, len(l.objs))
	for _, oi := range l.objs {
		page.Objects = append(page.Objects, oi)
	}
	slices.SortFunc(page.Objects, func(a, b backends.ObjectInfo) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		switch {
		case a.IsDir == b.IsDir:
			return 0
		case b.IsDir:
			return -1
		}
		return 1
	})
	page.Prefixes = make([]string, 0, len(l.prefixes))
	for p := range l.prefixes {
		page.Prefixes = append(page.Prefixes, p)
	}
	slices.Sort(page.Prefixes)
	return page, nil
}

// objID tells entries apart: a store may hold a file and a directory
// marker under one key.
type objID struct {
	key string
	dir bool
}

type lister struct {
	ctx    context.Context
	cancel context.CancelFunc
	b      backends.Backend
	opt    backends.ListOptions
	o      Options
	sem    chan struct{} // a slot per List call in flight
	wg     sync.WaitGroup

	active atomic.Int32 // ranges being listed
	ranges atomic.Int32 // ranges started
	pages  atomic.Int64
	probes atomic.Int64

	mu       sync.Mutex
	objs     map[objID]backends.ObjectInfo // GUARDED_BY(mu)
	prefixes map[string]bool               // GUARDED_BY(mu)
	err      error                         // GUARDED_BY(mu): the first failure
}

func (l *lister) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	l.cancel()
}

// list makes one List call in a request slot.
func (l *lister) list(opt backends.ListOptions) (backends.ListPage, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.ctx.Done():
		return backends.ListPage{}, l.ctx.Err()
	}
	defer func() { <-l.sem }()
	return l.b.List(l.ctx, opt)
}

func (l *lister) collect(page backends.ListPage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, oi := range page.Objects {
		l.objs[objID{oi.Key, oi.IsDir}] = oi
	}
	for _, p := range page.Prefixes {
		l.prefixes[p] = true
	}
}

// start lists the range (lo, hi], already counted in ranges, in a
// goroutine of its own.
func (l *lister) start(lo, hi string) {
	l.active.Add(1)
	l.wg.Add(1)
	go l.run(lo, hi)
}

// run lists the range of entries after lo up to hi ("": to the end) page
// after page, splitting what is left of it while request slots would
// otherwise stay idle.
func (l *lister) run(lo, hi string) {
	defer l.wg.Done()
	defer l.active.Add(-1)
	opt := l.opt
	opt.StartAfter = lo
	for {
		page, err := l.list(opt)
		if err != nil {
			l.fail(err)
			return
		}
		l.pages.Add(1)
		l.collect(page)
		last, ok := lastKey(page)
		if page.NextToken == "" || ok && hi != "" && last > hi {
			return
		}
		opt.Token = page.NextToken
		if !ok {
			continue
		}
		keys, alphabet := sample(l.opt.Prefix, page)
		if l.active.Load() < int32(l.o.Requests) && l.ranges.Load() < int32(l.o.MaxRanges) {
			var done bool
			if hi, done = l.split(keys, alphabet, last, hi); done {
				return
			}
			continue
		}
		// A range that ends about where this page did would read a
		// whole page past its end to learn it: one key tells as much.
		if sc, ok := newScale(keys, alphabet, hi); ok && hi != "" && sc.entries(last, hi) < nearEnd*float64(len(keys)) {
			if first, found, err := l.probe(last); err != nil {
				return
			} else if !found || first > hi {
				return
			}
		}
	}
}

// probe returns the Key of the first entry after key. A page may come
// back empty with a token (a store skipped what it does not list, or
// stopped at a time limit): the probe then follows the token, since an
// empty page is no proof that nothing follows.
func (l *lister) probe(key string) (first string, found bool, err error) {
	opt := l.opt
	opt.StartAfter, opt.MaxKeys, opt.Links = key, 1, false
	for {
		page, err := l.list(opt)
		if err != nil {
			l.fail(err)
			return "", false, err
		}
		l.probes.Add(1)
		if first, found = lastKey(page); found || page.NextToken == "" {
			return first, found, nil
		}
		opt.Token = page.NextToken
	}
}

// sample returns a page's keys, sorted, and the runes of their names
// after prefix (no '/', no stray byte), sorted.
func sample(prefix string, page backends.ListPage) (keys []string, alphabet []rune) {
	keys = make([]string, 0, len(page.Objects)+len(page.Prefixes))
	for _, oi := range page.Objects {
		keys = append(keys, oi.Key)
	}
	keys = append(keys, page.Prefixes...)
	slices.Sort(keys)
	seen := map[rune]bool{}
	for _, k := range keys {
		n := strings.TrimPrefix(k, prefix)
		for i, w := 0, 0; i < len(n); i += w {
			var r rune
			r, w = utf8.DecodeRuneInString(n[i:])
			if r == utf8.RuneError && w == 1 || r == '/' {
				continue // a stray byte is no rune to split at
			}
			seen[r] = true
		}
	}
	alphabet = make([]rune, 0, len(seen))
	for r := range seen {
		alphabet = append(alphabet, r)
	}
	slices.Sort(alphabet)
	return keys, alphabet
}

// lastKey is the largest Key of a page.
func lastKey(page backends.ListPage) (string, bool) {
	var last string
	ok := false
	for _, oi := range page.Objects {
		if !ok || oi.Key > last {
			last, ok = oi.Key, true
		}
	}
	for _, p := range page.Prefixes {
		if !ok || p > last {
			last, ok = p, true
		}
	}
	return last, ok
}

// split cuts what is left of a range, the keys after last up to hi, at
// split points that probing shows to start non-empty ranges of a few
// pages at least, and starts the ranges after the first. It returns the
// end of the range left to the caller, or done when nothing is left after
// last.
func (l *lister) split(keys []string, alphabet []rune, last, hi string) (newHi string, done bool) {
	points := candidates(l.opt.Prefix, last, hi, keys, alphabet, !l.opt.Recursive)
	// Only points likely to start ranges of a few pages (every range
	// costs up to a page read past its end, or a probe) are probed.
	sc, haveScale := newScale(keys, alphabet, append(points, hi)...)
	minEntries := minRangePages * float64(len(keys))
	if haveScale {
		spaced := points[:0]
		from := last
		for _, p := range points {
			if sc.entries(from, p) >= minEntries {
				spaced = append(spaced, p)
				from = p
			}
		}
		points = spaced
	}
	// first[i] is the Key of the first entry after after[i]: last, then
	// the points.
	after := append([]string{last}, points...)
	first := make([]string, len(after))
	found := make([]bool, len(after))
	var wg sync.WaitGroup
	for i, s := range after {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first[i], found[i], _ = l.probe(s)
		}()
	}
	wg.Wait()
	if l.ctx.Err() != nil {
		return hi, true
	}
	past := func(i int) bool { return !found[i] || hi != "" && first[i] > hi }
	if past(0) {
		return hi, true // nothing after last up to hi
	}
	// Keep a point when it starts a range of its own: something lies
	// after it, within the range, and not the same first entry as the
	// point before (then nothing lies between them).
	var keep []string
	prev := first[0]
	for i := 1; i < len(after); i++ {
		if past(i) {
			break // and so for every later point
		}
		if first[i] == prev {
			continue
		}
		prev = first[i]
		keep = append(keep, after[i])
	}
	// Reserve the ranges: other ranges split at the same time. Points
	// given back leave their ranges to the range before them.
	total := int(l.ranges.Add(int32(len(keep))))
	if over := total - l.o.MaxRanges; over > 0 {
		over = min(over, len(keep))
		l.ranges.Add(-int32(over))
		keep = keep[:len(keep)-over]
	}
	for i, s := range keep {
		end := hi
		if i+1 < len(keep) {
			end = keep[i+1]
		}
		l.start(s, end)
	}
	if len(keep) == 0 {
		return hi, false
	}
	return keep[0], false
}

// candidates returns split points between last and hi ("": no bound), in
// ascending order: the runes seen in the page's names, each put after the
// first d runes of last's name, for the few depths d above where the
// page's names begin to differ. In a non-recursive listing no point holds
// a '/' after the prefix.
func candidates(prefix, last, hi string, keys []string, alphabet []rune, flat bool) []string {
	if len(keys) == 0 || len(alphabet) == 0 || !strings.HasPrefix(last, prefix) {
		return nil
	}
	name := last[len(prefix):]
	// starts[d] is the byte offset of rune d of name.
	var starts []int
	for i, w := 0, 0; i < len(name); i += w {
		_, w = utf8.DecodeRuneInString(name[i:])
		starts = append(starts, i)
	}
	if len(starts) == 0 {
		return nil
	}
	lcp := commonPrefix(keys[0], keys[len(keys)-1]) - len(prefix)
	deep := 0 // the rune where the page's names begin to differ
	for deep+1 < len(starts) && starts[deep+1] <= lcp {
		deep++
	}
	// Points at the depth where the page's names differ would cut ranges
	// smaller than a page (the page spans several values there): start
	// one rune shallower.
	top := max(deep-1, 0)
	var points []string
	for d := top; d >= 0 && d > top-splitDepths; d-- {
		if flat && strings.Contains(name[:starts[d]], "/") {
			continue
		}
		base := prefix + name[:starts[d]]
		cur, _ := utf8.DecodeRuneInString(name[starts[d]:])
		for _, r := range alphabet {
			if r <= cur {
				continue
			}
			p := base + string(r)
			if p > last && (hi == "" || p < hi) {
				points = append(points, p)
			}
		}
	}
	slices.Sort(points)
	points = slices.Compact(points)
	if len(points) > maxPoints {
		// Keep the points evenly: the coarse ones (late in the order)
		// cover most of the space, the fine ones the part next to last.
		kept := make([]string, 0, maxPoints)
		for i := range maxPoints {
			kept = append(kept, points[i*len(points)/maxPoints])
		}
		points = slices.Compact(kept)
	}
	return points
}

// commonPrefix returns the length in bytes of the common prefix of a and b.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
