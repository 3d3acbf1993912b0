package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// tiny is a dataset small enough for unit tests but with every feature:
// several shards, small files over several directories, odd sizes.
// It is never modified: tests that need another profile copy it.
var tiny = Profile{Name: "tiny", Shards: 3, ShardSize: 1<<20 + 4096*3 + 5, SmallFiles: 50, SmallSize: 3000, SmallPerDir: 16, MetaEntries: 300}

func prepare(t *testing.T, p Profile, seed uint64) (string, *Manifest) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	m, err := Prepare(context.Background(), dir, PrepareOptions{Profile: p, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// readTree returns every regular file under dir by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestContentFillAnyRange(t *testing.T) {
	c := Content{Seed: 42}
	whole := make([]byte, 10000)
	c.Fill(whole, 0)
	for _, r := range [][2]int{{0, 1}, {1, 7}, {3, 8}, {7, 9}, {8, 8}, {13, 5000}, {9991, 9}, {4096, 4096}} {
		got := make([]byte, r[1])
		c.Fill(got, int64(r[0]))
		if !bytes.Equal(got, whole[r[0]:r[0]+r[1]]) {
			t.Errorf("Fill(off %d, len %d) differs from the same range of a whole fill", r[0], r[1])
		}
	}
	// A block served from the wrong offset is caught.
	var v0 Verifier
	if err := v0.Check("f", c, whole[4096:8192], 0); err == nil {
		t.Error("block 1 passed as block 0")
	}
	if err := v0.Check("f", c, whole[8:4104], 0); err == nil {
		t.Error("a range shifted by one word passed")
	}
	other := make([]byte, len(whole))
	Content{Seed: 43}.Fill(other, 0)
	if bytes.Equal(other, whole) {
		t.Error("different seeds gave the same content")
	}
	var v Verifier
	if err := v.Check("f", c, whole[100:7000], 100); err != nil {
		t.Errorf("Check of right bytes: %v", err)
	}
	bad := bytes.Clone(whole)
	bad[5555] ^= 0x10
	var me *MismatchError
	if err := v.Check("f", c, bad[5000:], 5000); !errors.As(err, &me) || me.Offset != 5555 || me.File != "f" {
		t.Errorf("Check of a flipped byte at 5555 = %v, want a mismatch at 5555", err)
	}
}

func TestPrepareIsDeterministic(t *testing.T) {
	a, ma := prepare(t, tiny, 7)
	b, mb := prepare(t, tiny, 7)
	ta, tb := readTree(t, a), readTree(t, b)
	if len(ta) != len(tb) || len(ta) != 1+tiny.Shards+tiny.SmallFiles+tiny.MetaEntries {
		t.Fatalf("trees have %d and %d files, want %d", len(ta), len(tb), 1+tiny.Shards+tiny.SmallFiles+tiny.MetaEntries)
	}
	for p, x := range ta {
		if !bytes.Equal(x, tb[p]) {
			t.Fatalf("%s differs between two prepares with the same seed", p)
		}
	}
	if !bytes.Equal(ta[ManifestName], tb[ManifestName]) {
		t.Fatal("manifests differ")
	}
	if ma.Shards[0].XXH64 == "" || ma.Shards[0].XXH64 != mb.Shards[0].XXH64 {
		t.Fatalf("checksums %q, %q", ma.Shards[0].XXH64, mb.Shards[0].XXH64)
	}
	// Each file is exactly its content, and sizes vary around the mean.
	sizes := map[int64]bool{}
	for _, f := range append(ma.Shards, ma.Small...) {
		want := make([]byte, f.Size)
		f.Content().Fill(want, 0)
		if !bytes.Equal(ta[filepath.FromSlash(f.Path)], want) {
			t.Fatalf("%s is not its content", f.Path)
		}
		sizes[f.Size] = true
	}
	if len(sizes) < 10 {
		t.Errorf("only %d distinct file sizes", len(sizes))
	}
	for _, f := range ma.Small {
		if f.Size < tiny.SmallSize*3/4 || f.Size > tiny.SmallSize*5/4 {
			t.Errorf("%s: size %d outside 75%%..125%% of %d", f.Path, f.Size, tiny.SmallSize)
		}
	}
	c, _ := prepare(t, tiny, 8)
	if bytes.Equal(readTree(t, c)[filepath.FromSlash(ma.Shards[0].Path)], ta[filepath.FromSlash(ma.Shards[0].Path)]) {
		t.Error("another seed gave the same shard")
	}
	if _, err := LoadManifest(a); err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	// Reuse accepts the same dataset and refuses another.
	if m, err := Prepare(context.Background(), a, PrepareOptions{Profile: tiny, Seed: 7, Reuse: true}); err != nil || m.Shards[0].XXH64 != ma.Shards[0].XXH64 {
		t.Errorf("Prepare --reuse of the same dataset: %v", err)
	}
	if _, err := Prepare(context.Background(), a, PrepareOptions{Profile: tiny, Seed: 8, Reuse: true}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Prepare --reuse of another seed: %v", err)
	}
}

func TestPrepareRefusesAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Prepare(context.Background(), dir, PrepareOptions{Profile: tiny, Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Prepare into a non-empty dir: %v", err)
	}
	if _, err := Prepare(context.Background(), filepath.Join(dir, "bad"), PrepareOptions{Profile: Profile{Shards: 1}}); err == nil {
		t.Fatal("Prepare with an invalid profile succeeded")
	}
	// A cancelled prepare leaves the empty directory it was given, empty.
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Prepare(ctx, empty, PrepareOptions{Profile: tiny, Seed: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Prepare: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("cancelled Prepare left %d entries", len(ents))
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Prepare(ctx, missing, PrepareOptions{Profile: tiny, Seed: 1}); err == nil {
		t.Fatal("cancelled Prepare succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cancelled Prepare left %s: %v", missing, err)
	}
}

func runOpts(writeDir string) RunOptions {
	return RunOptions{Threads: 4, Runs: 1, RandomOps: 200, WriteDir: writeDir, CkptSize: 3<<20 + 17, Cache: CacheWarm, Target: "local"}
}

func result(t *testing.T, r *Report, workload, cache string) Result {
	t.Helper()
	for _, x := range r.Results {
		if x.Workload == workload && x.Cache == cache {
			return x
		}
	}
	t.Fatalf("no %s/%s result in %+v", workload, cache, r.Results)
	return Result{}
}

func TestRunEveryWorkload(t *testing.T) {
	dir, m := prepare(t, tiny, 3)
	wd := t.TempDir()
	rep, err := Run(context.Background(), DirFS(dir), runOpts(wd))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(WorkloadNames()) {
		t.Fatalf("%d results, want one per workload (%v)", len(rep.Results), WorkloadNames())
	}
	shardBytes := sumSize(m.Shards)
	checks := []struct {
		name, cache  string
		bytes, files int64
		ops          int64
		threads      int
	}{
		{"seq1", CacheWarm, shardBytes, int64(tiny.Shards), -1, 1},
		{"seqN", CacheWarm, shardBytes, int64(tiny.Shards), -1, 3},
		{"epoch", CacheWarm, sumSize(m.Small), int64(tiny.SmallFiles), int64(tiny.SmallFiles), 4},
		{"random", CacheWarm, -1, 0, 200, 4},
		{"ckpt", CacheNA, 3<<20 + 17, 1, 4, 1},
		{"list", CacheWarm, 0, int64(tiny.MetaEntries), 1, 1},
		{"stat", CacheWarm, 0, int64(tiny.MetaEntries), int64(tiny.MetaEntries), 4},
	}
	for _, c := range checks {
		x := result(t, rep, c.name, c.cache)
		if len(x.Runs) != 1 {
			t.Fatalf("%s: %d runs", c.name, len(x.Runs))
		}
		s := x.Runs[0]
		if c.bytes >= 0 && s.Bytes != c.bytes || s.Files != c.files || c.ops >= 0 && s.Ops != c.ops || x.Threads != c.threads {
			t.Errorf("%s: bytes %d files %d ops %d threads %d, want %d %d %d %d", c.name, s.Bytes, s.Files, s.Ops, x.Threads, c.bytes, c.files, c.ops, c.threads)
		}
		if x.Value() <= 0 || x.P50ms <= 0 || x.P99ms < x.P50ms || s.Seconds <= 0 || x.Partial {
			t.Errorf("%s: implausible figures %+v", c.name, x)
		}
		// The rates are what the counts say over the time.
		if d := s.MBps - float64(s.Bytes)/1e6/s.Seconds; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: MB/s %f for %d bytes in %fs", c.name, s.MBps, s.Bytes, s.Seconds)
		}
	}
	// Random reads are 4 KiB..1 MiB each.
	r := result(t, rep, "random", CacheWarm).Runs[0]
	if avg := r.Bytes / r.Ops; avg < 4<<10 || avg > 1<<20 {
		t.Errorf("random: %d bytes per read on average", avg)
	}
	if ck := result(t, rep, "ckpt", CacheNA).Runs[0]; ck.Extra["fsync_ms"] <= 0 {
		t.Errorf("ckpt: fsync time %v", ck.Extra)
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 0 {
		t.Errorf("ckpt left %d files in the write dir", len(ents))
	}
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, w := range WorkloadNames() {
		if !strings.Contains(tab.String(), w) {
			t.Errorf("table lacks %s:\n%s", w, tab.String())
		}
	}
}

func TestRunWithoutWriteDirSkipsCkpt(t *testing.T) {
	dir, _ := prepare(t, tiny, 3)
	opt := runOpts("")
	opt.Workloads = []string{"list"}
	rep, err := Run(context.Background(), DirFS(dir), opt)
	if err != nil || len(rep.Results) != 1 {
		t.Fatalf("list only: %v, %+v", err, rep)
	}
	opt.Workloads = nil
	rep, err = Run(context.Background(), DirFS(dir), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "ckpt skipped") {
		t.Errorf("notes %v", rep.Notes)
	}
	opt.Workloads = []string{"ckpt"}
	if _, err := Run(context.Background(), DirFS(dir), opt); err == nil || !strings.Contains(err.Error(), "--write-dir") {
		t.Errorf("ckpt without a write dir: %v", err)
	}
	opt.Workloads = []string{"nope"}
	if _, err := Run(context.Background(), DirFS(dir), opt); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown workload: %v", err)
	}
	if _, err := Run(context.Background(), DirFS(t.TempDir()), runOpts("")); err == nil || !strings.Contains(err.Error(), ManifestName) {
		t.Errorf("run on a dir without a dataset: %v", err)
	}
}

func TestRunFailsOnWrongBytes(t *testing.T) {
	for _, c := range []struct {
		workload string
		file     func(m *Manifest) File
		off      int64
	}{
		{"seq1", func(m *Manifest) File { return m.Shards[1] }, 777777},
		{"seqN", func(m *Manifest) File { return m.Shards[2] }, 1 << 20},
		{"epoch", func(m *Manifest) File { return m.Small[17] }, 2049},
	} {
		t.Run(c.workload, func(t *testing.T) {
			dir, m := prepare(t, tiny, 5)
			f := c.file(m)
			p := filepath.Join(dir, filepath.FromSlash(f.Path))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[c.off] ^= 0x01
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			opt := runOpts("")
			opt.Workloads = []string{c.workload}
			_, err = Run(context.Background(), DirFS(dir), opt)
			var me *MismatchError
			if !errors.As(err, &me) || me.File != f.Path || me.Offset != c.off {
				t.Fatalf("run over a flipped byte of %s at %d: %v", f.Path, c.off, err)
			}
			if !strings.Contains(err.Error(), f.Path) {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
	t.Run("random", func(t *testing.T) {
		// Every 4 KiB block of a one-shard dataset corrupted: any read hits one.
		p := tiny
		p.Shards, p.ShardSize = 1, 1<<20
		dir, m := prepare(t, p, 5)
		sp := filepath.Join(dir, filepath.FromSlash(m.Shards[0].Path))
		b, _ := os.ReadFile(sp)
		for i := 100; i < len(b); i += 4096 {
			b[i] ^= 0x80
		}
		if err := os.WriteFile(sp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		opt := runOpts("")
		opt.Workloads = []string{"random"}
		_, err := Run(context.Background(), DirFS(dir), opt)
		var me *MismatchError
		if !errors.As(err, &me) || me.File != m.Shards[0].Path || me.Offset%4096 != 100 {
			t.Fatalf("random reads over corrupt blocks: %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		dir, m := prepare(t, tiny, 5)
		f := m.Small[3]
		if err := os.Truncate(filepath.Join(dir, filepath.FromSlash(f.Path)), f.Size-1); err != nil {
			t.Fatal(err)
		}
		opt := runOpts("")
		opt.Workloads = []string{"epoch"}
		_, err := Run(context.Background(), DirFS(dir), opt)
		if err == nil || !strings.Contains(err.Error(), f.Path) {
			t.Fatalf("epoch over a truncated file: %v", err)
		}
	})
	t.Run("missing entry", func(t *testing.T) {
		dir, m := prepare(t, tiny, 5)
		if err := os.Remove(filepath.Join(dir, m.MetaDir, MetaName(5))); err != nil {
			t.Fatal(err)
		}
		opt := runOpts("")
		opt.Workloads = []string{"list"}
		if _, err := Run(context.Background(), DirFS(dir), opt); err == nil || !strings.Contains(err.Error(), "entries") {
			t.Fatalf("list of a short directory: %v", err)
		}
	})
}

func TestRunCacheStates(t *testing.T) {
	dir, _ := prepare(t, tiny, 9)
	drops := 0
	opt := runOpts(t.TempDir())
	opt.Workloads = []string{"seq1", "ckpt", "stat"}
	opt.Runs = 3
	opt.Cache = CacheBoth
	opt.DropCaches = func() error { drops++; return nil }
	rep, err := Run(context.Background(), DirFS(dir), opt)
	if err != nil {
		t.Fatal(err)
	}
	if drops != 2*3 {
		t.Errorf("page cache dropped %d times, want once before each of 3 cold runs of 2 read workloads", drops)
	}
	for _, w := range []string{"seq1", "stat"} {
		for _, c := range []string{CacheCold, CacheWarm} {
			if x := result(t, rep, w, c); len(x.Runs) != 3 {
				t.Errorf("%s/%s: %d runs", w, c, len(x.Runs))
			}
		}
	}
	if x := result(t, rep, "ckpt", CacheNA); len(x.Runs) != 3 {
		t.Errorf("ckpt: %d runs", len(x.Runs))
	}
	if !strings.HasPrefix(rep.PageCache, "dropped") {
		t.Errorf("page cache note %q", rep.PageCache)
	}

	opt.Cache = CacheCold
	opt.Runs = 1
	opt.DropCaches = func() error { return os.ErrPermission }
	rep, err = Run(context.Background(), DirFS(dir), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.PageCache, "NOT dropped") {
		t.Errorf("a failed drop is not reported: %q", rep.PageCache)
	}
	var tab bytes.Buffer
	rep.WriteTable(&tab)
	if !strings.Contains(tab.String(), "NOT dropped") {
		t.Errorf("table does not say the cache was not dropped:\n%s", tab.String())
	}
}

func TestRunDurationStopsEarly(t *testing.T) {
	dir, _ := prepare(t, tiny, 9)
	opt := runOpts("")
	opt.Workloads = []string{"seq1", "epoch", "stat"}
	opt.Duration = time.Nanosecond
	rep, err := Run(context.Background(), DirFS(dir), opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rep.Results {
		if !x.Partial {
			t.Errorf("%s: not marked partial after a 1ns --duration", x.Workload)
		}
	}
}

func TestReportJSONAndCompare(t *testing.T) {
	dir, _ := prepare(t, tiny, 11)
	opt := runOpts("")
	opt.Workloads = []string{"seq1", "list"}
	var reps []*Report
	for _, target := range []string{"local", "peer", "local"} {
		opt.Target = target
		rep, err := Run(context.Background(), DirFS(dir), opt)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := rep.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var generic map[string]any
		if err := json.Unmarshal(buf.Bytes(), &generic); err != nil {
			t.Fatalf("report JSON does not parse: %v", err)
		}
		if generic["format"] != ReportFormat || generic["target"] != target {
			t.Fatalf("JSON %v", generic)
		}
		p := filepath.Join(t.TempDir(), "r.json")
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := ReadReport(p)
		if err != nil {
			t.Fatal(err)
		}
		if back.Results[0].MBps != rep.Results[0].MBps || back.Results[0].Runs[0].Bytes != rep.Results[0].Runs[0].Bytes {
			t.Fatal("report changed through JSON")
		}
		reps = append(reps, back)
	}
	cmp, err := Compare(reps, "local", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Reports) != 2 || len(result(t, cmp.Reports[0], "seq1", CacheWarm).Runs) != 2 {
		t.Fatalf("two reports of target local were not pooled: %+v", cmp.Reports)
	}
	var md bytes.Buffer
	if err := cmp.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	// local pooled two runs, peer has one: its cells say so.
	if !strings.Contains(md.String(), "| workload | cache | metric | local | peer |") || !strings.Contains(md.String(), "(1.00×)") ||
		!strings.Contains(md.String(), "[1 run]") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if _, err := Compare(reps, "nobody", ""); err == nil {
		t.Error("an unknown --limit was accepted")
	}
	other := *reps[1]
	other.Seed++
	if _, err := Compare([]*Report{reps[0], &other}, "", ""); err == nil {
		t.Error("reports of different datasets were compared")
	}

	out := filepath.Join(t.TempDir(), "cmp.png")
	if err := Plot(out, cmp.Reports); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 200 {
		t.Errorf("plot is %v", b)
	}
}

func TestCompareColdLimit(t *testing.T) {
	res := func(cache string, mbps float64) Result {
		r := Result{Workload: "seq1", Cache: cache, Metric: MetricMBps, Runs: []Sample{{MBps: mbps}}}
		r.summarize()
		return r
	}
	reps := []*Report{
		{Target: "local", Results: []Result{res(CacheCold, 100), res(CacheWarm, 200)}},
		{Target: "direct", Results: []Result{res(CacheCold, 50)}},
		{Target: "peer", Results: []Result{res(CacheCold, 25), res(CacheWarm, 100)}},
	}
	cmp, err := Compare(reps, "local", "direct")
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := cmp.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| seq1 | cold | MB/s | 100 (2.00×) | 50.0 (1.00×) | 25.0 (0.50×) |",
		"| seq1 | warm | MB/s | 200 (1.00×) | — | 100 (0.50×) |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if _, err := Compare(reps, "local", "nobody"); err == nil {
		t.Error("an unknown --cold-limit was accepted")
	}

	// The plot shows the same ratios, on a linear axis.
	p, got := cmp.ratioPlot("seq1", vg.Inch*4)
	if _, ok := p.Y.Scale.(plot.LinearScale); !ok {
		t.Errorf("ratio axis scale %T; want linear", p.Y.Scale)
	}
	want := [][]float64{{2, 1, 0.5}, {1, 0, 0.5}} // cold ÷ direct, warm ÷ local; direct has no warm row
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plotted ratios %v; want %v", got, want)
	}
	if p.Y.Min != 0 || p.Y.Max < 2 || p.Y.Max > ratioAxisMax {
		t.Errorf("axis %v..%v; want from 0, past the largest ratio (2), at most %v", p.Y.Min, p.Y.Max, ratioAxisMax)
	}
	out := filepath.Join(t.TempDir(), "ratios.png")
	if err := cmp.PlotRatios(out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("ratio plot is not a PNG: %v", err)
	}
	noLimit, err := Compare(reps, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := noLimit.PlotRatios(out); err == nil {
		t.Error("a ratio plot without a limit was drawn")
	}
}

// TestConfirmDropPageCache: the cache states that drop the whole host's
// page cache run only when confirmed; the others need no confirmation.
func TestConfirmDropPageCache(t *testing.T) {
	for _, c := range []struct {
		cache     string
		confirmed bool
		want      string
	}{
		{CacheCold, false, "--cache cold drops the page cache of the whole host before each cold run (every process's cached files, not only this dataset's; other jobs on a shared host slow down): add --drop-page-cache to confirm, or measure with --cache warm or --cache as-is"},
		{CacheBoth, false, "--cache both drops the page cache of the whole host before each cold run (every process's cached files, not only this dataset's; other jobs on a shared host slow down): add --drop-page-cache to confirm, or measure with --cache warm or --cache as-is"},
		{CacheCold, true, ""},
		{CacheBoth, true, ""},
		{CacheWarm, false, ""},
		{CacheAsIs, false, ""},
	} {
		err := ConfirmDropPageCache(c.cache, c.confirmed)
		if got := fmt.Sprint(err); (err == nil) != (c.want == "") || err != nil && got != c.want {
			t.Errorf("ConfirmDropPageCache(%s, %v) = %v, want %q", c.cache, c.confirmed, err, c.want)
		}
	}
}
