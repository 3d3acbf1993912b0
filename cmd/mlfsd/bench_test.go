package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/bench"
)

// benchPrepare prepares a small dataset with the CLI and returns its dir.
func benchPrepare(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	code, out, stderr := runMlfsd(t, "bench", "prepare", "--profile", "test", "--shard-size", "2MiB",
		"--small-files", "60", "--small-size", "10KiB", "--meta-entries", "500", "--seed", "4", dir)
	if code != 0 || !strings.Contains(out, "prepared "+dir) {
		t.Fatalf("bench prepare: exit %d\n%s%s", code, out, stderr)
	}
	return dir
}

func TestBenchCLI(t *testing.T) {
	dir := benchPrepare(t)
	m, err := bench.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Seed != 4 || m.Profile.ShardSize != 2<<20 || len(m.Small) != 60 || m.MetaEntries != 500 || len(m.Shards) != 2 {
		t.Fatalf("flags did not reach the dataset: %+v", m.Profile)
	}
	// A second prepare into the same directory is refused.
	if code, _, stderr := runMlfsd(t, "bench", "prepare", "--profile", "test", dir); code == 0 || !strings.Contains(stderr, "not empty") {
		t.Errorf("prepare into a full dir: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runMlfsd(t, "bench", "prepare", "--shard-size", "lots", filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(stderr, "lots") {
		t.Errorf("prepare with a bad size: exit %d, %s", code, stderr)
	}

	tmp := t.TempDir()
	wd := t.TempDir()
	var reports []string
	for _, target := range []string{"local", "again"} {
		jsonPath := filepath.Join(tmp, target+".json")
		code, out, stderr := runMlfsd(t, "bench", "run", dir, "--json", "--cache", "warm", "--runs", "1", "--threads", "3",
			"--random-ops", "50", "--write-dir", wd, "--ckpt-size", "1MiB", "--target", target, "--out", jsonPath,
			"--plot", filepath.Join(tmp, target+".png"))
		if code != 0 {
			t.Fatalf("bench run: exit %d\n%s", code, stderr)
		}
		var rep bench.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json output does not parse: %v\n%s", err, out)
		}
		if rep.Target != target || len(rep.Results) != len(bench.WorkloadNames()) {
			t.Fatalf("report: target %q, %d results", rep.Target, len(rep.Results))
		}
		for _, r := range rep.Results {
			if r.Value() <= 0 {
				t.Errorf("%s: %s %v", r.Workload, r.Metric, r.Value())
			}
		}
		if _, err := bench.ReadReport(jsonPath); err != nil {
			t.Fatalf("--out: %v", err)
		}
		checkPNG(t, filepath.Join(tmp, target+".png"))
		reports = append(reports, jsonPath)
	}

	// The table names every workload.
	code, out, stderr := runMlfsd(t, "bench", "run", dir, "--cache", "as-is", "--runs", "1", "--workloads", "seq1,stat")
	if code != 0 || !strings.Contains(out, "seq1") || !strings.Contains(out, "stat") || strings.Contains(out, "epoch") {
		t.Fatalf("bench run table: exit %d\n%s%s", code, out, stderr)
	}

	// A directory URI is read through its backend, without FUSE.
	code, out, stderr = runMlfsd(t, "bench", "run", "nas://"+dir+"/", "--cache", "as-is", "--runs", "1", "--workloads", "seq1,epoch,list")
	if code != 0 || !strings.Contains(out, "nas://"+dir+"/") || !strings.Contains(out, "epoch") {
		t.Fatalf("bench run URI: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runMlfsd(t, "bench", "run", "nas://"+dir+"/manifest.json"); code == 0 || !strings.Contains(stderr, "one object") {
		t.Errorf("bench run of an object URI: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runMlfsd(t, "bench", "run", filepath.Join(dir, "nope")); code == 0 || !strings.Contains(stderr, "no such file") {
		t.Errorf("bench run of a missing path: exit %d, %s", code, stderr)
	}

	// Reports side by side, as Markdown, with ratios to the limit.
	plot := filepath.Join(tmp, "cmp.png")
	code, out, stderr = runMlfsd(t, append([]string{"bench", "report", "--markdown", "--limit", "local", "--plot", plot}, reports...)...)
	if code != 0 || !strings.Contains(out, "| local | again |") || !strings.Contains(out, "(1.00×)") {
		t.Fatalf("bench report: exit %d\n%s%s", code, out, stderr)
	}
	checkPNG(t, plot)
	plot2 := filepath.Join(tmp, "plot.png")
	if code, out, stderr := runMlfsd(t, append([]string{"bench", "plot", "-o", plot2}, reports...)...); code != 0 || !strings.Contains(out, plot2) {
		t.Fatalf("bench plot: exit %d\n%s%s", code, out, stderr)
	}
	checkPNG(t, plot2)
	if code, _, stderr := runMlfsd(t, "bench", "report", filepath.Join(dir, bench.ManifestName)); code == 0 || !strings.Contains(stderr, "format") {
		t.Errorf("bench report of a non-report: exit %d, %s", code, stderr)
	}

	// One wrong byte fails the run, naming the file and offset.
	f := m.Small[7]
	p := filepath.Join(dir, filepath.FromSlash(f.Path))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMlfsd(t, "bench", "run", dir, "--cache", "as-is", "--runs", "1", "--workloads", "epoch")
	if code == 0 || !strings.Contains(stderr, f.Path) || !strings.Contains(stderr, "offset 100") {
		t.Fatalf("bench run over a corrupt file: exit %d, stderr %q", code, stderr)
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
}

// TestBenchOnFUSEMount runs bench against the dataset mounted read-only by
// mlfsd itself (both in subprocesses of the test binary).
func TestBenchOnFUSEMount(t *testing.T) {
	dir := benchPrepare(t)
	mnt := t.TempDir()
	d := startDaemon(t, mlfsdCmd(t, "mount", "--cache-dir", t.TempDir(), "--read-only", "nas://"+dir+"/", mnt), mnt)

	code, out, errs := runMlfsd(t, "bench", "run", mnt, "--json", "--cache", "warm", "--runs", "1", "--threads", "4", "--random-ops", "100")
	if code != 0 {
		t.Fatalf("bench run on the mount: exit %d\n%s\nmount stderr:\n%s", code, errs, d.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// Every read workload ran over the mount and read everything it should.
	m, _ := bench.LoadManifest(dir)
	var small int64
	for _, f := range m.Small {
		small += f.Size
	}
	for _, r := range rep.Results {
		s := r.Runs[0]
		switch r.Workload {
		case "seq1", "seqN":
			if s.Bytes != int64(len(m.Shards))*m.Profile.ShardSize {
				t.Errorf("%s read %d bytes", r.Workload, s.Bytes)
			}
		case "epoch":
			if s.Bytes != small || s.Files != int64(len(m.Small)) {
				t.Errorf("epoch read %d files, %d bytes", s.Files, s.Bytes)
			}
		case "list", "stat":
			if s.Files != int64(m.MetaEntries) {
				t.Errorf("%s saw %d entries", r.Workload, s.Files)
			}
		}
		if r.Value() <= 0 {
			t.Errorf("%s: %s %v", r.Workload, r.Metric, r.Value())
		}
	}

	if err := d.stop(t); err != nil {
		t.Fatalf("mlfsd mount exited with %v; stderr:\n%s", err, d.stderr)
	}
}
