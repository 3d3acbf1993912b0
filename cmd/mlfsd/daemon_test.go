package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
)

// nodeDaemon is an `mlfsd daemon` running in a subprocess.
type nodeDaemon struct {
	cmd      *exec.Cmd
	socket   string
	metrics  string // host:port of /metrics
	stderr   *syncBuffer
	done     chan error
	stateDir string
	ready    string // its --ready-file
}

// waitReady waits until d says it serves (its ready file) and takes the
// metrics address from it.
func (d *nodeDaemon) waitReady(t testing.TB) {
	t.Helper()
	info := waitReady(t, d.ready, d.done, d.stderr)
	if info.Socket != d.socket || info.Metrics == "" {
		t.Fatalf("ready file %+v: want socket %s and a metrics address", info, d.socket)
	}
	d.metrics = info.Metrics
}

// startNodeDaemon starts `mlfsd daemon` with its state, socket and cache in
// dir and waits until its API answers. When the test ends it is killed and
// every mount under the test's temp dirs detached.
func startNodeDaemon(t testing.TB, dir string, extra ...string) *nodeDaemon {
	t.Helper()
	d := &nodeDaemon{socket: filepath.Join(dir, "api.sock"), stateDir: filepath.Join(dir, "state"),
		stderr: &syncBuffer{}, done: make(chan error, 1)}
	args := append([]string{"daemon", "--state-dir", d.stateDir, "--socket", d.socket,
		"--cache-dir", filepath.Join(dir, "cache"), "--staging-dir", filepath.Join(dir, "staging"),
		"--cache-memory", "64MiB", "--cache-free-floor", "0", "--metrics-listen", "127.0.0.1:0",
		"--nas-root", testNASRoot(t),
		// These tests stop daemons to clean up: unmount then.
		"--on-stop=unmount"}, extra...)
	d.cmd = mlfsdCmd(t, args...)
	d.ready = withReadyFile(t, d.cmd)
	ossEnv(d.cmd)
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		detachUnder(t, filepath.Dir(dir))
	})
	d.waitReady(t)
	return d
}

// testNASRoot is the --nas-root a test's daemon or plugin gets: the
// parent of the test's temp dirs, read-write, so the test's own stores
// are allowed and nothing else on the host is.
func testNASRoot(t testing.TB) string {
	return filepath.Dir(t.TempDir()) + ":rw"
}

// detachUnder lazily unmounts whatever is mounted under dir.
func detachUnder(t testing.TB, dir string) {
	for _, m := range mountsUnder(t, dir) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (d *nodeDaemon) stop(t testing.TB) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Errorf("mlfsd daemon: %v; stderr:\n%s", err, d.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("mlfsd daemon did not exit after SIGTERM; stderr:\n%s", d.stderr)
	}
}

// client runs an mlfsd client command against the daemon, with the OSS
// keys in its environment.
func (d *nodeDaemon) client(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := mlfsdCmd(t, args...)
	ossEnv(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// scrape fetches /metrics and parses it with the Prometheus text parser.
func (d *nodeDaemon) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeMetrics(t, d.metrics)
}

// scrapeMetrics fetches http://addr/metrics and parses it with the
// Prometheus text parser.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// metricValue sums the samples of family name whose labels include want.
func metricValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

// TestDaemonSharesCacheAcrossClients: two client processes mount the same
// OSS dataset through one daemon; reading it through both mounts fetches it
// from the store once (the emulator's byte counter), the status and the
// metrics say so, and unmounting through the API leaves nothing mounted.
func TestDaemonSharesCacheAcrossClients(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	shard := randomBytes(t, 24<<20+7)
	os.WriteFile(filepath.Join(root, "bkt", "data", "shard.bin"), shard, 0o644)
	srv, endpoint := startSignedOSS(t, root, ossemu.Options{})
	d := startNodeDaemon(t, t.TempDir(), "--oss-endpoint", endpoint, "--cache-memory", "256MiB")

	a, b := t.TempDir(), t.TempDir()
	for _, mnt := range []string{a, b} {
		code, out, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", mnt)
		if code != 0 || !strings.Contains(out, "mounted oss://bkt/data/ at "+mnt) {
			t.Fatalf("mount --daemon: exit %d, %q, %q", code, out, errOut)
		}
		if !isMounted(t, mnt) {
			t.Fatalf("%s not mounted once mount --daemon returned", mnt)
		}
	}
	var after [2]int64
	for i, mnt := range []string{a, b} {
		got, err := os.ReadFile(filepath.Join(mnt, "shard.bin"))
		if err != nil || !bytes.Equal(got, shard) {
			t.Fatalf("read through %s: %d bytes, %v", mnt, len(got), err)
		}
		after[i] = srv.Stats()["bytes.out"]
	}
	// The second mount is served by the cache the first one filled. (How
	// much a cold read fetches beyond the object is the cache's business,
	// measured in its own tests and benchmarks; the bound here is loose so
	// that a loaded machine does not fail it.)
	served := after[1]
	if second := after[1] - after[0]; float64(second) > 0.05*float64(len(shard)) {
		t.Errorf("the second mount of the same object made the store send %d more bytes (first: %d, object: %d); want it served by the shared cache",
			second, after[0], len(shard))
	}
	if served < int64(len(shard)) || float64(served) > 1.25*float64(len(shard)) {
		t.Errorf("the store sent %d bytes for two mounts reading one %d-byte object; want it fetched once", served, len(shard))
	}

	code, out, errOut := d.client(t, "status", "--daemon", d.socket, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	var st []node.MountStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(st) != 2 || st[0].URI != "oss://bkt/data/" || !st[0].ReadOnly {
		t.Fatalf("status: %+v", st)
	}
	if st[0].BackendReadBytes+st[1].BackendReadBytes != served {
		t.Errorf("status says the mounts read %d+%d bytes from the store; the store sent %d", st[0].BackendReadBytes, st[1].BackendReadBytes, served)
	}
	if code, out, _ := d.client(t, "status", "--daemon", d.socket); code != 0 || !strings.Contains(out, a) || !strings.Contains(out, "TARGET") {
		t.Errorf("status table: %q", out)
	}

	// Metrics: names and labels, through the Prometheus text parser.
	out2 := t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "oss://bkt/out/", out2); code != 0 {
		t.Fatalf("output mount: %s", errOut)
	}
	if err := os.WriteFile(filepath.Join(out2, "x.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	mfs := d.scrape(t)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{node.MetricBackendReadBytes, map[string]string{"mount": a}},
		{node.MetricBackendRequests, map[string]string{"mount": a, "op": "read", "result": "ok"}},
		{node.MetricBackendRequests, map[string]string{"mount": a, "op": "list", "result": "ok"}},
		{node.MetricCacheHitBytes, map[string]string{"tier": "memory"}},
		{node.MetricCacheHitBytes, map[string]string{"tier": "disk"}},
		{node.MetricCacheHitBytes, map[string]string{"tier": "passthrough"}},
		{node.MetricCacheBytes, map[string]string{"tier": "disk"}},
		{node.MetricFUSERequests, map[string]string{"mount": a, "op": "lookup"}},
		{node.MetricFUSELatency, map[string]string{"mount": b, "op": "lookup"}},
		{node.MetricUploadPendingFiles, map[string]string{"mount": out2}},
		{node.MetricUploadPendingBytes, map[string]string{"mount": out2}},
		{node.MetricUploadFailures, map[string]string{"mount": out2}},
	} {
		if _, ok := metricValue(t, mfs, c.name, c.labels); !ok {
			t.Errorf("no %s%v in the scrape", c.name, c.labels)
		}
	}
	if v, _ := metricValue(t, mfs, node.MetricBackendReadBytes, nil); int64(v) != served {
		t.Errorf("%s sums to %v; the store sent %d", node.MetricBackendReadBytes, v, served)
	}
	if mfs[node.MetricFUSELatency].GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("%s is a %v, want a histogram", node.MetricFUSELatency, mfs[node.MetricFUSELatency].GetType())
	}
	resp, err := http.Get("http://" + d.metrics + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz: %s", resp.Status)
	}

	// Unmount through the API: the output is drained first.
	for _, mnt := range []string{a, b, out2} {
		if code, _, errOut := d.client(t, "umount", "--daemon", d.socket, mnt); code != 0 {
			t.Fatalf("umount %s: %s", mnt, errOut)
		}
		if isMounted(t, mnt) {
			t.Errorf("%s still mounted after umount --daemon", mnt)
		}
	}
	if got, err := os.ReadFile(filepath.Join(root, "bkt", "out", "x.txt")); err != nil || string(got) != "hello" {
		t.Errorf("output after umount: %q, %v", got, err)
	}
	if strings.Contains(d.stderr.String(), "test-secret") {
		t.Error("the daemon logged the OSS secret")
	}
	d.stop(t)
}

// TestDaemonRefusesBadRequests: each bad request gets a clear error and
// leaves nothing mounted.
func TestDaemonRefusesBadRequests(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644)
	tmp := t.TempDir()
	d := startNodeDaemon(t, t.TempDir())
	mnt := filepath.Join(tmp, "m")
	os.Mkdir(mnt, 0o755)
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "nas://"+src+"/", mnt); code != 0 {
		t.Fatalf("mount: %s", errOut)
	}
	// The identical request again is the same mount, not an error.
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "nas://"+src+"/", mnt); code != 0 {
		t.Errorf("identical mount again: %s", errOut)
	}
	fresh := filepath.Join(tmp, "fresh")
	os.Mkdir(fresh, 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--daemon", d.socket, "nas://" + src + "/", mnt}, "already mounted"},
		{[]string{"mount", "--daemon", d.socket, "--read-only", "nas://" + src + "/", filepath.Join(tmp, "missing")}, "does not exist"},
		{[]string{"mount", "--daemon", d.socket, "--read-only", "gs://bucket/x/", fresh}, "scheme"},
		{[]string{"mount", "--daemon", d.socket, "--read-only", "--cache-memory", "1GiB", "nas://" + src + "/", fresh}, "node-wide"},
		{[]string{"mount", "--daemon", d.socket, "--read-only", "--oss-part-size", "0", "nas://" + src + "/", fresh}, `"0"`},
		{[]string{"umount", "--daemon", d.socket, fresh}, "not mounted"},
		{[]string{"mount", "--daemon", filepath.Join(tmp, "no.sock"), "--read-only", "nas://" + src + "/", fresh}, "no daemon at"},
	} {
		code, _, errOut := d.client(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("mlfsd %v: exit %d, stderr %q; want a failure mentioning %q", c.args, code, errOut, c.want)
		}
	}
	// A bad option value in the request itself (past the client's flags).
	_, err := api.NewClient(d.socket).Mount(context.Background(), node.MountRequest{URI: "nas://" + src + "/", Target: fresh,
		ReadOnly: true, Options: map[string]string{"oss-retry-attempts": "-1"}})
	if err == nil || !strings.Contains(err.Error(), `--oss-retry-attempts "-1"`) {
		t.Errorf("bad option value over the API: %v", err)
	}
	_, err = api.NewClient(d.socket).Mount(context.Background(), node.MountRequest{URI: "nas://" + src + "/", ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "target") {
		t.Errorf("request without a target: %v", err)
	}
	if ms := mountsUnder(t, tmp); len(ms) != 1 || ms[0] != mnt {
		t.Errorf("mounted under %s: %v; want only %s", tmp, ms, mnt)
	}
	d.stop(t)
	if ms := mountsUnder(t, tmp); len(ms) != 0 {
		t.Errorf("still mounted after the daemon stopped: %v", ms)
	}
}

// TestDaemonSocketRefusesOtherUsers: the socket is 0600 root's, and even
// when its mode is opened up, the daemon refuses a peer that is not root
// (SO_PEERCRED).
func TestDaemonSocketRefusesOtherUsers(t *testing.T) {
	d := startNodeDaemon(t, t.TempDir())
	fi, err := os.Stat(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	// The socket's directory must be reachable by the other user for the
	// test to reach the checks at all.
	os.Chmod(filepath.Dir(d.socket), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(d.socket)), 0o755)
	// The client runs as uid 65534: a copy of this test binary (acting as
	// mlfsd) where that user may execute it.
	exeDir := t.TempDir()
	os.Chmod(exeDir, 0o755)
	os.Chmod(filepath.Dir(exeDir), 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(exeDir, "mlfsd")
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func() (string, error) {
		cmd := exec.Command(exe, "status", "--daemon", d.socket)
		cmd.Env = append(os.Environ(), "MLFSD_TEST_MAIN=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); ok {
			err = nil // the refusal is the point
		}
		return string(out), err
	}
	out, err := asNobody()
	if err != nil || !strings.Contains(out, "its socket is root's only; run this as root") || strings.Contains(out, "TARGET") {
		t.Errorf("uid 65534 on the 0600 socket: %v, %q; want connect refused", err, out)
	}
	if err := os.Chmod(d.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	out, err = asNobody()
	if err != nil || !strings.Contains(out, "serves root only (client uid 65534)") {
		t.Errorf("uid 65534 on an opened-up socket: %v, %q; want a refusal naming the uid", err, out)
	}
	if code, _, errOut := d.client(t, "status", "--daemon", d.socket); code != 0 {
		t.Errorf("root's status: %s", errOut)
	}
	d.stop(t)
}

// TestDaemonHealsAfterSIGKILL: a daemon killed with SIGKILL while an
// upload is pending leaves stale mounts; started again on the same state
// dir, it keeps them waiting for their client's credentials (never on its
// own), and once the client mounts again it detaches the stale mounts,
// serves the same paths and finishes the upload, with no one running
// umount.
func TestDaemonHealsAfterSIGKILL(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	os.MkdirAll(filepath.Join(root, "bkt", "out"), 0o755)
	os.WriteFile(filepath.Join(root, "bkt", "data", "in.txt"), []byte("input"), 0o644)
	srv, endpoint := startSignedOSS(t, root, ossemu.Options{})
	dir := t.TempDir()
	d := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	in, out := t.TempDir(), t.TempDir()
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input: %s", errOut)
	}
	if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output: %s", errOut)
	}
	// Create the file while the store answers (create looks it up), then
	// fail every store request: the upload stays pending.
	f, err := os.Create(filepath.Join(out, "ckpt.bin"))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(1, ossemu.Fault503)
	ckpt := randomBytes(t, 3<<20)
	if _, err := f.Write(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, func() bool { return srv.Stats()["fault.503"] > 0 }, "the upload to be tried")
	d.cmd.Process.Kill()
	<-d.done
	d.done <- nil
	for _, m := range []string{in, out} {
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(m, &sfs); err != syscall.ENOTCONN {
			t.Fatalf("statfs %s after SIGKILL = %v, want ENOTCONN (stale)", m, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "bkt", "out", "ckpt.bin")); err == nil {
		t.Fatal("the checkpoint reached the store while every request failed")
	}

	srv.SetFaults(0)
	d2 := startNodeDaemon(t, dir, "--oss-endpoint", endpoint)
	// The mounts were made with the client's keys (its environment's),
	// which are not kept: they wait for them, and are not served with the
	// daemon's own meanwhile. The client brings them again.
	var waiting []node.MountStatus
	code, lst, _ := d2.client(t, "status", "--daemon", d2.socket, "--json")
	if code != 0 || json.Unmarshal([]byte(lst), &waiting) != nil || len(waiting) != 2 ||
		waiting[0].State != node.StateWaitingCredentials || waiting[1].State != node.StateWaitingCredentials {
		t.Errorf("status after the restart: %s", lst)
	}
	if code, _, errOut := d2.client(t, "mount", "--daemon", d2.socket, "--read-only", "oss://bkt/data/", in); code != 0 {
		t.Fatalf("mount input again: %s", errOut)
	}
	if code, _, errOut := d2.client(t, "mount", "--daemon", d2.socket, "oss://bkt/out/", out); code != 0 {
		t.Fatalf("mount output again: %s", errOut)
	}
	if got, err := os.ReadFile(filepath.Join(in, "in.txt")); err != nil || string(got) != "input" {
		t.Errorf("input after restart: %q, %v", got, err)
	}
	waitObject(t, filepath.Join(root, "bkt", "out", "ckpt.bin"), ckpt, d2) // the pending checkpoint, uploaded after the restart
	if got, err := os.ReadFile(filepath.Join(out, "ckpt.bin")); err != nil || !bytes.Equal(got, ckpt) {
		t.Errorf("checkpoint through the restored output mount: %d bytes, %v", len(got), err)
	}
	var ms []node.MountStatus
	code, lst, _ = d2.client(t, "status", "--daemon", d2.socket, "--json")
	if code != 0 || json.Unmarshal([]byte(lst), &ms) != nil || len(ms) != 2 || ms[0].State != node.StateMounted {
		t.Errorf("status after the restart: %s", lst)
	}
	d2.stop(t)
	for _, m := range []string{in, out} {
		if isMounted(t, m) {
			t.Errorf("%s still mounted after a clean stop", m)
		}
	}
	// A clean stop empties the mount table: a third start mounts nothing.
	data, err := os.ReadFile(filepath.Join(dir, "state", "mounts.json"))
	if err != nil || !strings.Contains(string(data), `"mounts": null`) && !strings.Contains(string(data), `"mounts": []`) {
		t.Errorf("mount table after a clean stop: %s, %v", data, err)
	}
}

// TestRunThroughDaemon: `mlfsd run --daemon` runs the quickstart job with
// its channels mounted by the daemon; outputs are drained, nothing stays
// mounted and the daemon's table is empty afterwards.
func TestRunThroughDaemon(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "ml")
	store := filepath.Join(tmp, "outputs")
	spec, err := filepath.Abs("../../examples/quickstart/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The quickstart's code and data are read-only roots of the daemon.
	d := startNodeDaemon(t, t.TempDir(), "--nas-root", filepath.Dir(spec)+":ro")
	code, stdout, stderr := d.client(t, "run", "--daemon", d.socket, "--spec", spec, "--root", root, "--output-path", "nas://"+store+"/")
	if code != 0 {
		t.Fatalf("mlfsd run --daemon: exit %d\nstdout:\n%s\nstderr:\n%s\ndaemon:\n%s", code, stdout, stderr, d.stderr)
	}
	if !strings.Contains(stdout, "trained 5 epochs on 64 rows") {
		t.Errorf("script output %q", stdout)
	}
	if data, err := os.ReadFile(filepath.Join(store, "model", "model.json")); err != nil || !strings.Contains(string(data), "val_mse") {
		t.Errorf("model.json in the store: %q, %v", data, err)
	}
	if m := mountsUnder(t, tmp); len(m) > 0 {
		t.Errorf("still mounted after mlfsd run --daemon: %v", m)
	}
	if ms, err := api.NewClient(d.socket).List(context.Background()); err != nil || len(ms) != 0 {
		t.Errorf("daemon mounts after the job: %v, %v", ms, err)
	}
	if code, _, stderr := d.client(t, "run", "--daemon", d.socket, "--cache-dir", tmp, "--spec", spec); code == 0 || !strings.Contains(stderr, "node-wide") {
		t.Errorf("run --daemon with a node-wide flag: exit %d, %q", code, stderr)
	}
	d.stop(t)
}

// TestDaemonNotifiesSystemd: with $NOTIFY_SOCKET set (Type=notify), the
// daemon sends READY=1 once its API answers, and STOPPING=1 on SIGTERM.
func TestDaemonNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	ns := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", ns) // inherited by the daemon through mlfsdCmd
	d := startNodeDaemon(t, t.TempDir())
	got := make(chan string, 4)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			if msg := string(buf[:n]); msg != "BARRIER=1" { // each notification's barrier (internal/sdnotify)
				got <- msg
			}
		}
	}()
	select {
	case msg := <-got:
		if msg != "READY=1" {
			t.Errorf("first notification %q, want READY=1", msg)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no READY=1 from the daemon")
	}
	if code, _, errOut := d.client(t, "status", "--daemon", d.socket); code != 0 {
		t.Errorf("status after READY=1: %s", errOut)
	}
	d.stop(t)
	select {
	case msg := <-got:
		if msg != "STOPPING=1" {
			t.Errorf("notification on SIGTERM %q, want STOPPING=1", msg)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no STOPPING=1 from the daemon")
	}
}
