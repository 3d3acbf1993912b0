package node

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Series per label set, as docs/MONITORING.md counts them: a FUSE
// operation has its request counter and its latency histogram (10 bounds
// and +Inf, _sum, _count); a store operation has up to 4 results and its
// latency histogram (8 bounds and +Inf, _sum, _count).
const (
	seriesPerFUSEOp  = 1 + 11 + 2
	seriesPerStoreOp = 4 + 9 + 2
)

// seriesCount is how many series mf exposes.
func seriesCount(mf *dto.MetricFamily) int {
	n := 0
	for _, m := range mf.GetMetric() {
		if h := m.GetHistogram(); h != nil {
			n += len(h.GetBucket()) + 1 + 2 // the bounds, +Inf, _sum, _count
			continue
		}
		n++
	}
	return n
}

// labelOf returns m's value of label name, or "".
func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// mountSeries gathers n's metrics and returns, for the mount at target,
// the number of series, the FUSE and store operations seen, and the
// families by name.
func mountSeries(t *testing.T, n *Node, target string) (series int, fuseOps, storeOps map[string]bool, fams map[string]*dto.MetricFamily) {
	t.Helper()
	mfs, err := gatherers{n}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fuseOps, storeOps, fams = map[string]bool{}, map[string]bool{}, map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
		for _, m := range mf.GetMetric() {
			if labelOf(m, "mount") != target {
				continue
			}
			series += seriesCount(&dto.MetricFamily{Metric: []*dto.Metric{m}})
			switch mf.GetName() {
			case MetricFUSERequests:
				fuseOps[labelOf(m, "op")] = true
			case MetricBackendRequests:
				storeOps[labelOf(m, "op")] = true
			}
		}
	}
	return series, fuseOps, storeOps, fams
}

// TestInputMountSeriesAreLazy: a fresh input mount that served a reader
// exports series only for the operations it served (none for write, on
// FUSE or the store), within the documented bound, where every mount used
// to export 308 FUSE series up front; the store's requests are timed by
// operation, and a failed one is counted by the store's code.
func TestInputMountSeriesAreLazy(t *testing.T) {
	n := newTestNode(t, "")
	src := t.TempDir()
	data := randomBytes(t, 1<<20)
	os.MkdirAll(filepath.Join(src, "shards"), 0o755)
	os.WriteFile(filepath.Join(src, "shards", "a.bin"), data, 0o644)
	os.WriteFile(filepath.Join(src, "shards", "gone.bin"), data, 0o644)
	mnt := t.TempDir()
	if _, err := n.Mount(t.Context(), MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	// Mounting looks at the root (getattr) and the store (stat, list).
	series, fuse, store, _ := mountSeries(t, n, mnt)
	if len(fuse) > 1 || series > 2+len(fuse)*seriesPerFUSEOp+len(store)*seriesPerStoreOp {
		t.Errorf("a mount that served no reader exports %d series, FUSE operations %v, store operations %v", series, fuse, store)
	}

	if got := readFile(t, filepath.Join(mnt, "shards", "a.bin")); !bytes.Equal(got, data) {
		t.Fatal("read wrong bytes")
	}
	series, fuse, store, fams := mountSeries(t, n, mnt)
	for op := range fuse {
		switch op {
		case "lookup", "getattr", "open", "read", "flush", "release":
		default:
			t.Errorf("FUSE operation %q exported; a reader of one file sent none", op)
		}
	}
	for _, op := range []string{"lookup", "open", "read"} {
		if !fuse[op] {
			t.Errorf("no series of FUSE operation %q after a read (have %v)", op, fuse)
		}
	}
	bound := 2 + len(fuse)*seriesPerFUSEOp + len(store)*seriesPerStoreOp
	t.Logf("after one read: %d series of the mount (FUSE %v, store %v); bound %d", series, fuse, store, bound)
	if series > bound {
		t.Errorf("%d series for %d FUSE and %d store operations; the documented bound is %d", series, len(fuse), len(store), bound)
	}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			if labelOf(m, "mount") == mnt && (labelOf(m, "op") == "write" || labelOf(m, "op") == "multipart") {
				t.Errorf("%s has a write series on an input mount that was only read", name)
			}
		}
	}
	var reads uint64
	for _, m := range fams[MetricBackendLatency].GetMetric() {
		if labelOf(m, "mount") == mnt && labelOf(m, "op") == "read" {
			reads = m.GetHistogram().GetSampleCount()
		}
	}
	if reads == 0 {
		t.Errorf("%s{op=read} observed nothing after a cold read", MetricBackendLatency)
	}

	// An object gone from the store since the listing: the read fails with
	// the store's own code.
	if err := os.Remove(filepath.Join(src, "shards", "gone.bin")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cat", filepath.Join(mnt, "shards", "gone.bin")).CombinedOutput(); err == nil {
		t.Fatalf("reading an object removed from the store succeeded: %q", out)
	}
	_, _, _, fams = mountSeries(t, n, mnt)
	var enoent float64
	for _, m := range fams[MetricBackendErrors].GetMetric() {
		if labelOf(m, "mount") == mnt && labelOf(m, "code") == "ENOENT" {
			enoent += m.GetCounter().GetValue()
		}
	}
	if enoent == 0 {
		t.Errorf("no %s{code=ENOENT} after a read of a removed object; have %v", MetricBackendErrors, fams[MetricBackendErrors].GetMetric())
	}
	if fams[MetricBuildInfo] == nil || labelOf(fams[MetricBuildInfo].GetMetric()[0], "version") != "dev" {
		t.Errorf("%s: %v", MetricBuildInfo, fams[MetricBuildInfo])
	}
}

// TestTokenExpiry: the expiry exported for a mount's token is its exp
// claim; a token that is not a JWT with one has none (no series).
func TestTokenExpiry(t *testing.T) {
	exp := time.Unix(1900000000, 0)
	if got, ok := tokenExpiry(jwt(exp, 1)); !ok || !got.Equal(exp) {
		t.Errorf("tokenExpiry of a JWT expiring at %v: %v, %v", exp, got, ok)
	}
	for _, tok := range []string{"", "opaque-token", "a.b.c", "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".c"} {
		if got, ok := tokenExpiry(tok); ok {
			t.Errorf("tokenExpiry(%q) = %v; want none", tok, got)
		}
	}
	id, err := newIdentity(Credentials{S3RoleARN: "arn:aws:iam::1:role/r", S3WebIdentityToken: jwt(exp, 2)}, IdentitySettings{}, "us-east-1", "/mnt/x")
	if err != nil {
		t.Fatal(err)
	}
	m := newMountMetrics("/mnt/x", id)
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() == MetricCredentialsExpiry {
			for _, s := range mf.GetMetric() {
				got = append(got, fmt.Sprintf("%s=%v", labelOf(s, "credential"), s.GetGauge().GetValue()))
			}
		}
	}
	if want := fmt.Sprintf("s3_web_identity_token=%v", float64(exp.Unix())); len(got) != 1 || got[0] != want {
		t.Errorf("%s: %v; want [%s]", MetricCredentialsExpiry, got, want)
	}
}
