package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/cache"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// waitWarm waits for warm-up id to end and returns its last status.
func waitWarm(t *testing.T, n *Node, id string) WarmStatus {
	t.Helper()
	var st WarmStatus
	testwait.Eventually(t, func() bool {
		var err error
		if st, err = n.WarmStatus(id); err != nil {
			t.Fatal(err)
		}
		return st.Ended()
	}, "warm-up %s to end", id)
	return st
}

func datasetUsage(u CacheUsage, ds string) cache.DatasetUsage {
	for _, d := range u.Datasets {
		if d.Dataset == ds {
			return d
		}
	}
	return cache.DatasetUsage{}
}

// TestCacheWarmDuClear: a warm-up fetches a dataset into the node's cache
// and its shared tier, with its progress; du shows it per dataset and per
// mount; a second warm-up (a file list, then through a mount) fetches
// nothing; clear drops it, and refuses a URI the cache holds nothing of.
func TestCacheWarmDuClear(t *testing.T) {
	n := newTestNodeWith(t, "", func(s *Settings) { s.Shared.KeyFile = writeTierKey(t) })
	src, tierDir := t.TempDir(), t.TempDir()
	sizes := map[string]int{"a/1.bin": 3<<20 + 5, "a/2.bin": 100 << 10, "b/3.bin": 2 << 20}
	var total int64
	for name, size := range sizes {
		os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(src, name), randomBytes(t, size), 0o644)
		total += int64(size)
	}
	uri := "nas://" + src + "/"
	opts := map[string]string{"shared-cache": "nas://" + tierDir + "/"}
	ctx := t.Context()

	st, err := n.Warm(ctx, WarmRequest{URI: uri, Options: opts, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	st = waitWarm(t, n, st.ID)
	if st.State != WarmDone || st.Files != 3 || st.FilesDone != 3 || st.Bytes != total || st.BytesDone != total || st.BytesFetched != total || st.FilesCached != 0 {
		t.Fatalf("first warm-up: %+v; want 3 files, %d bytes, all fetched", st, total)
	}
	testwait.Eventually(t, func() bool { return datasetUsage(n.CacheUsage(), uri).Complete == 3 }, "3 objects complete on disk")
	u := n.CacheUsage()
	if d := datasetUsage(u, uri); d.Objects != 3 || d.DiskBytes < total {
		t.Errorf("du after the warm-up: %+v; want 3 objects, >= %d bytes on disk", d, total)
	}
	n.shared.mu.Lock()
	tier := n.shared.tiers["nas://"+tierDir+"/"]
	n.shared.mu.Unlock()
	if tier == nil {
		t.Fatal("the warm-up opened no shared tier")
	}
	if err := tier.t.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if u = n.CacheUsage(); len(u.Shared) != 1 || u.Shared[0].WrittenBytes[uri] != total {
		t.Errorf("du's shared tiers: %+v; want %d bytes of %s written", u.Shared, total, uri)
	}
	if len(u.Warms) != 1 || u.Warms[0].ID != st.ID || u.Warms[0].State != WarmDone {
		t.Errorf("du's warm-ups: %+v", u.Warms)
	}

	// Again, a file list: complete already, nothing fetched.
	st, err = n.Warm(ctx, WarmRequest{URI: uri, Options: opts, Files: []string{"a/1.bin", "/b/3.bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if st = waitWarm(t, n, st.ID); st.State != WarmDone || st.Files != 2 || st.FilesCached != 2 || st.BytesFetched != 0 {
		t.Errorf("warm-up of a file list, cached: %+v; want 2 files cached, 0 bytes fetched", st)
	}

	// Through an input mount: du names its dataset.
	mnt := t.TempDir()
	if _, err := n.Mount(ctx, MountRequest{URI: uri, Target: mnt, ReadOnly: true, Options: opts}); err != nil {
		t.Fatal(err)
	}
	st, err = n.Warm(ctx, WarmRequest{Target: mnt})
	if err != nil {
		t.Fatal(err)
	}
	if st = waitWarm(t, n, st.ID); st.State != WarmDone || st.URI != uri || st.FilesCached != 3 || st.BytesFetched != 0 {
		t.Errorf("warm-up through a mount, cached: %+v", st)
	}
	if u = n.CacheUsage(); len(u.Mounts) != 1 || u.Mounts[0].Target != mnt || u.Mounts[0].Dataset != uri {
		t.Errorf("du's mounts: %+v; want %s reading %s", u.Mounts, mnt, uri)
	}

	// Bad requests say what is wrong.
	for _, tc := range []struct {
		req  WarmRequest
		want string
	}{
		{WarmRequest{URI: uri, Parallel: -1}, "parallel"},
		{WarmRequest{URI: uri + "a/1.bin", Files: []string{"x"}}, "one object"},
		{WarmRequest{URI: "nas://" + filepath.Join(src, "missing") + "/"}, "missing"},
		{WarmRequest{Target: t.TempDir()}, "not mounted"},
	} {
		if _, err := n.Warm(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Warm(%+v): %v; want an error saying %q", tc.req, err, tc.want)
		}
	}
	if _, err := n.ClearCache(ctx, ClearRequest{URI: "nas://" + t.TempDir() + "/"}); err == nil || !strings.Contains(err.Error(), "cache du") {
		t.Errorf("clearing a dataset the cache does not hold: %v", err)
	}
	if _, err := n.ClearCache(ctx, ClearRequest{Shared: true}); err == nil || !strings.Contains(err.Error(), "needs a URI") {
		t.Errorf("clearing the whole shared tier: %v", err)
	}
	res, err := n.ClearCache(ctx, ClearRequest{URI: uri, Shared: true, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	// 3 MiB+5, 100 KiB and 2 MiB: 4+1+2 blocks of 1 MiB in the tier.
	if res.Objects != 3 || res.DiskBytes < total || res.Shared.Blocks != 7 || res.Shared.Bytes < total {
		t.Errorf("clear: %+v; want 3 objects, >= %d bytes, and their 7 blocks from the shared tier", res, total)
	}
	if res, err := n.ClearCache(ctx, ClearRequest{URI: uri, Shared: true, Options: opts}); err != nil || res.Shared.Blocks != 0 {
		t.Errorf("clearing the shared tier again: %+v, %v; want nothing left", res, err)
	}
	if d := datasetUsage(n.CacheUsage(), uri); d.Objects != 0 || d.MemoryBytes != 0 {
		t.Errorf("du after the clear: %+v", d)
	}
}

// TestDatasetMatcher: a URI matches the datasets under it, with or
// without the endpoint a backend ID carries.
func TestDatasetMatcher(t *testing.T) {
	for _, tc := range []struct {
		uri, dataset string
		want         bool
	}{
		{"oss://bkt/data/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/data/", true},
		{"oss://bkt/data/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/data/train/", true},
		{"oss://bkt/data/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/database/", false},
		{"oss://bkt/data/", "oss://other.oss-cn-hangzhou.aliyuncs.com/data/", false},
		{"oss://bkt.oss-cn-beijing.aliyuncs.com/data/", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/data/", false},
		{"oss://bkt/data/x.bin", "oss://bkt.oss-cn-hangzhou.aliyuncs.com/data/", true},
		{"nas:///srv/a/", "nas:///srv/a/", true},
		{"nas:///srv/a/", "nas:///srv/ab/", false},
		{"s3://bkt/data/", "oss://bkt/data/", false},
	} {
		m, err := DatasetMatcher(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		if got := m(tc.dataset); got != tc.want {
			t.Errorf("%s matches %s: %v, want %v", tc.uri, tc.dataset, got, tc.want)
		}
	}
}
