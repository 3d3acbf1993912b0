package cache

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// Datasets. The disk tier's files are named by hashes (store.go), which do
// not say whose data they hold; `mlfsd cache du` and `mlfsd cache clear
// URI` need to. So the cache keeps, per dataset (the backend ID of its
// objects: store and root, e.g. oss://bucket.endpoint/prefix/), an index of
// the key hashes it cached:
//
//	v1/datasets/<hash(dataset)>   "dataset <ID>\n", then one key hash a line
//
// A line is appended (one small write) when an object of a key the index
// lacks is first pinned; New rewrites each index with the keys still on
// disk, and so does a running cache once the lines appended since
// outnumber the keys it holds (compactIndex): evicted keys leave the
// index, which stays within a few times the cache's key count. The index labels data, nothing is served from it: a line lost in a
// crash leaves its object under an unknown dataset ("") in Usage until it
// is opened again, evicted, or everything is cleared.

const (
	datasetsDir    = "datasets"
	datasetsHeader = "dataset "
)

// datasetIndex appends to the datasets' indexes. Its mu is taken with no
// other lock held, and compactIndex takes Cache.mu under it.
type datasetIndex struct {
	dir        string // v1/datasets; "" without a disk tier
	log        *slog.Logger
	minCompact int // lines appended before a compaction is considered

	mu     sync.Mutex
	files  map[string]*os.File // GUARDED_BY(mu): open for appending, by dataset
	failed bool                // GUARDED_BY(mu): a write failed (logged once)
	// lines: the key lines written since the last rewrite, and written
	// in it; appended: those appended since. GUARDED_BY(mu)
	lines, appended int
	compacting      bool // GUARDED_BY(mu): a compaction is under way
}

// indexCompactAfter is how many lines must be appended before the
// index is compacted (at least as many as it held).
const indexCompactAfter = 100_000

func newDatasetIndex(cacheDir string, log *slog.Logger, minCompact int) *datasetIndex {
	x := &datasetIndex{log: log, files: map[string]*os.File{}, minCompact: minCompact}
	if cacheDir != "" {
		x.dir = filepath.Join(cacheDir, layoutVersion, datasetsDir)
	}
	return x
}

func datasetFile(dir, dataset string) string {
	h := sha256.Sum256([]byte(dataset))
	return filepath.Join(dir, hex.EncodeToString(h[:8]))
}

// add records that key hash kp belongs to dataset. It reports whether
// the index is due for a compaction (the caller starts it).
func (x *datasetIndex) add(dataset, kp string) (compact bool) {
	if x.dir == "" || dataset == "" || strings.ContainsAny(dataset, "\n") {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.appended++
	if x.appended > max(x.lines, x.minCompact) && !x.compacting {
		x.compacting = true
		compact = true
	}
	f := x.files[dataset]
	var err error
	if f == nil {
		f, err = x.open(dataset)
		if err == nil {
			x.files[dataset] = f
		}
	}
	if err == nil {
		_, err = f.WriteString(kp + "\n")
	}
	if err != nil && !x.failed {
		x.failed = true
		x.log.Warn("cache: recording which dataset cached objects belong to; `mlfsd cache du` will count some under an unknown dataset", "dir", x.dir, "err", err)
	}
	return compact
}

func (x *datasetIndex) open(dataset string) (*os.File, error) {
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(datasetFile(x.dir, dataset), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		_, err = f.WriteString(datasetsHeader + dataset + "\n")
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// rewrite replaces the indexes with the key hashes of each dataset given
// (New, once the disk tier is indexed): keys evicted since drop out.
func (x *datasetIndex) rewrite(keys map[string][]string) error {
	if x.dir == "" {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rewriteLocked(keys)
}

func (x *datasetIndex) rewriteLocked(keys map[string][]string) error {
	// Appending goes on in the new files.
	for ds, f := range x.files {
		f.Close()
		delete(x.files, ds)
	}
	x.lines, x.appended = 0, 0
	for _, kps := range keys {
		x.lines += len(kps)
	}
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return err
	}
	keep := map[string]bool{}
	for ds, kps := range keys {
		if ds == "" {
			continue
		}
		slices.Sort(kps)
		var b strings.Builder
		b.WriteString(datasetsHeader + ds + "\n")
		for i, kp := range kps {
			if i == 0 || kps[i-1] != kp {
				b.WriteString(kp + "\n")
			}
		}
		path := datasetFile(x.dir, ds)
		keep[filepath.Base(path)] = true
		if err := atomicfile.Write(path, []byte(b.String()), 0o600, atomicfile.FileSync); err != nil {
			return err
		}
	}
	ents, err := os.ReadDir(x.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			os.Remove(filepath.Join(x.dir, e.Name()))
		}
	}
	return nil
}

// compactIndex rewrites the indexes with the keys the cache holds now
// (see add). The index's lock is held from the snapshot of the keys to
// the rewrite, so that no line appended meanwhile is lost.
func (c *Cache) compactIndex() {
	x := c.index
	x.mu.Lock()
	defer x.mu.Unlock()
	x.compacting = false
	keys := map[string][]string{}
	c.mu.Lock()
	for _, e := range c.entries {
		keys[e.dataset] = append(keys[e.dataset], keyPrefix(e.id))
	}
	c.mu.Unlock()
	if err := x.rewriteLocked(keys); err != nil {
		c.log.Warn("cache: rewriting which dataset cached objects belong to", "dir", c.opt.Dir, "err", err)
	}
}

func (x *datasetIndex) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ds, f := range x.files {
		f.Close()
		delete(x.files, ds)
	}
}

// readDatasetIndex reads the indexes under cacheDir: dataset by key hash.
// Lines it cannot read are skipped (their objects count as unknown).
func readDatasetIndex(cacheDir string) (map[string]string, error) {
	dir := filepath.Join(cacheDir, layoutVersion, datasetsDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), tmpSuffix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		ds := ""
		for sc.Scan() {
			line := sc.Text()
			if ds == "" {
				if !strings.HasPrefix(line, datasetsHeader) {
					break
				}
				ds = strings.TrimPrefix(line, datasetsHeader)
				continue
			}
			if len(line) == 32 {
				out[line] = ds
			}
		}
		f.Close()
	}
	return out, nil
}

// DatasetUsage is what the cache holds of one dataset.
type DatasetUsage struct {
	// Dataset is the backend ID of its objects (store and root, e.g.
	// oss://bucket.endpoint/prefix/); "" for objects whose dataset is not
	// known (cached before the index recorded it).
	Dataset string `json:"dataset"`
	// Objects counts the objects with data in the disk tier, Complete
	// those held whole (served by passthrough).
	Objects  int64 `json:"objects"`
	Complete int64 `json:"complete"`
	// DiskBytes is the space its files take; MemoryBytes what its blocks
	// occupy in the memory tier.
	DiskBytes   int64 `json:"disk_bytes"`
	MemoryBytes int64 `json:"memory_bytes"`
	// Open counts its objects open now (by readers, or fetches under way).
	Open int64 `json:"open"`
}

// Usage returns what the cache holds, per dataset, sorted by dataset.
func (c *Cache) Usage() []DatasetUsage {
	by := map[string]*DatasetUsage{}
	get := func(ds string) *DatasetUsage {
		u := by[ds]
		if u == nil {
			u = &DatasetUsage{Dataset: ds}
			by[ds] = u
		}
		return u
	}
	c.mu.Lock()
	for _, e := range c.entries {
		e.mu.Lock()
		complete := e.complete
		e.mu.Unlock()
		if e.diskBytes == 0 && e.pins == 0 {
			continue
		}
		u := get(e.dataset)
		if e.diskBytes > 0 {
			u.Objects++
			u.DiskBytes += e.diskBytes
			if complete {
				u.Complete++
			}
		}
		if e.pins > 0 {
			u.Open++
		}
	}
	c.mu.Unlock()
	c.eachMemBlock(func(_, ds string, cost int64) { get(ds).MemoryBytes += cost })
	out := make([]DatasetUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b DatasetUsage) int { return strings.Compare(a.Dataset, b.Dataset) })
	return out
}

// eachMemBlock calls f for every block of the memory tier (ready buffer
// and ristretto), with its key, dataset and cost.
func (c *Cache) eachMemBlock(f func(key, dataset string, cost int64)) {
	c.ready.each(func(_ string, r blockRef) { f(r.b.key, r.b.dataset, r.cost()) })
	c.mem.IterValues(func(r blockRef) bool {
		if r.tryRef() { // not recycled since ristretto took it
			f(r.b.key, r.b.dataset, r.cost())
			r.unref()
		}
		return false
	})
}

// ClearResult is what Clear dropped.
type ClearResult struct {
	// Objects and DiskBytes: removed from the disk tier.
	Objects   int64 `json:"objects"`
	DiskBytes int64 `json:"disk_bytes"`
	// MemoryBytes: dropped from the memory tier.
	MemoryBytes int64 `json:"memory_bytes"`
	// Deferred counts objects open now: they are removed when their last
	// reader closes them (their readers keep reading right meanwhile).
	Deferred int64 `json:"deferred"`
}

// Clear drops from memory and disk the cached objects of the datasets
// match accepts (every dataset when match is nil). It is safe while the
// cache serves reads: an object open now keeps its disk file until its
// last handle closes (then it goes), and a block dropped from memory is
// read from disk or fetched again.
func (c *Cache) Clear(match func(dataset string) bool) ClearResult {
	if match == nil {
		match = func(string) bool { return true }
	}
	var res ClearResult
	c.mu.Lock()
	var victims []*entry
	for _, e := range c.entries {
		if !match(e.dataset) {
			continue
		}
		if e.pins > 0 {
			e.superseded = true // removed by its last release
			res.Deferred++
			continue
		}
		victims = append(victims, e)
	}
	for _, e := range victims {
		if e.diskBytes > 0 {
			res.Objects++
			res.DiskBytes += e.diskBytes
		}
		c.removeLocked(e)
	}
	c.mu.Unlock()
	var keys []string
	c.eachMemBlock(func(key, ds string, _ int64) {
		if match(ds) {
			keys = append(keys, key)
		}
	})
	for _, k := range keys {
		if n := c.ready.remove(k); n > 0 {
			res.MemoryBytes += n
			continue
		}
		if r, ok := c.mem.Get(k); ok && r.tryRef() {
			res.MemoryBytes += r.cost()
			r.unref()
			c.mem.Del(k)
		}
	}
	c.mem.Wait()
	return res
}

// DiskUsage reads what the disk tier in dir holds, per dataset, without
// opening it for use: for `mlfsd cache du` on a cache directory no
// process holds. A directory another process holds fails with a
// *DirBusyError (ask that process instead).
func DiskUsage(dir string) ([]DatasetUsage, error) {
	root := filepath.Join(dir, layoutVersion)
	if _, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("no mlfsd disk cache in %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	labels, err := readDatasetIndex(dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir %s: %w", dir, err)
	}
	by := map[string]*DatasetUsage{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == datasetsDir {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		id, part := strings.CutSuffix(name, partSuffix)
		if !validID(id) || filepath.Base(filepath.Dir(path)) != id[:2] {
			return nil // metadata, temporaries, the lock
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil // evicted meanwhile
		}
		ds := labels[keyPrefix(id)]
		u := by[ds]
		if u == nil {
			u = &DatasetUsage{Dataset: ds}
			by[ds] = u
		}
		u.Objects++
		u.DiskBytes += diskUsage(st)
		if !part {
			u.Complete++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache dir %s: %w", dir, err)
	}
	out := make([]DatasetUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b DatasetUsage) int { return strings.Compare(a.Dataset, b.Dataset) })
	return out, nil
}
