package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// heldUploads is an OSS endpoint in front of an emulator that holds every
// upload (PUT or POST) of a key containing "held" until release is closed.
func heldUploads(t *testing.T) (endpoint string, entered <-chan struct{}, release chan struct{}) {
	t.Helper()
	_, emu, _ := ossemutest.StartBucket(t, "bkt", ossemu.Options{})
	u, err := url.Parse(emu)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	in := make(chan struct{}, 16)
	release = make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, "held") {
			in <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, in, release
}

// TestHandoverDoesNotFreezeForAnotherMountsFsync: a takeover that starts
// while a durable fsync on one output waits for its upload freezes no
// other mount meanwhile: outputs and inputs of the node answer (stat, a
// write and close) for as long as the upload is held. Once it is let go,
// the fsync returns and the freeze completes. Before, the mounts were
// frozen one after the other, and each frozen before the one with the
// fsync waited for that upload (13.6 s in the audit; here as long as the
// test holds it).
func TestHandoverDoesNotFreezeForAnotherMountsFsync(t *testing.T) {
	t.Setenv("OSS_ACCESS_KEY_ID", "")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "")
	endpoint, entered, release := heldUploads(t)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	s := Defaults()
	s.Cache.Dir = t.TempDir()
	s.Cache.FreeFloorBytes = 0
	s.Output.StagingDir = t.TempDir()
	s.Backend.OSS.Endpoint = endpoint
	n, err := New(t.Context(), Options{Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	ctx := t.Context()

	held := t.TempDir()
	if _, err := n.Mount(ctx, MountRequest{URI: "oss://bkt/out/", Target: held,
		Credentials: Credentials{OSSAccessKeyID: ossemutest.AccessKeyID, OSSAccessKeySecret: ossemutest.AccessKeySecret}}); err != nil {
		t.Fatal(err)
	}
	// Eight other mounts: the old code froze the mounts one by one in the
	// map's order, so it failed here unless the held one came first (one
	// run in nine).
	type other struct {
		mnt    string
		output bool
	}
	var others []other
	for range 3 {
		mnt := t.TempDir()
		if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + t.TempDir() + "/", Target: mnt}); err != nil {
			t.Fatal(err)
		}
		others = append(others, other{mnt, true})
	}
	for range 5 {
		src, mnt := t.TempDir(), t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Mount(ctx, MountRequest{URI: "nas://" + src + "/", Target: mnt, ReadOnly: true}); err != nil {
			t.Fatal(err)
		}
		others = append(others, other{mnt, false})
	}

	// A durable fsync (dd conv=fsync), in another process: it waits for
	// the upload the endpoint holds.
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dd := exec.CommandContext(dctx, "dd", "if=/dev/zero", "of="+filepath.Join(held, "held.bin"), "bs=64k", "count=4", "conv=fsync")
	ddDone := make(chan error, 1)
	go func() {
		out, err := dd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		ddDone <- err
	}()
	select {
	case <-entered:
	case err := <-ddDone:
		t.Fatalf("dd ended before its upload was held: %v", err)
	}

	type frozen struct {
		h   *Handover
		err error
	}
	froze := make(chan frozen, 1)
	go func() {
		h, err := n.FreezeForHandover(dctx)
		froze <- frozen{h, err}
	}()
	// Whatever happens below, the upload is let go and the mounts thawed
	// before the node closes.
	var f *frozen
	defer func() {
		if !released {
			close(release)
			released = true
		}
		if f == nil {
			r := <-froze
			f = &r
		}
		if f.h != nil {
			f.h.Abort()
		}
	}()

	// The handover has begun once the node refuses mounts.
	testwait.Eventually(t, func() bool {
		select {
		case r := <-froze:
			f = &r
			return true
		default:
			return n.handingOver()
		}
	}, "the handover to begin")
	if f != nil {
		t.Fatalf("FreezeForHandover returned while the fsync was held: %v", f.err)
	}
	// probe reads (and on an output, writes) a file of o in another
	// process. A request to a frozen mount cannot be cut (the kernel
	// waits for the answer even for a killed process), so the probe is
	// given up, not killed, after its hang guard, far beyond what it
	// needs; the process ends once the mounts thaw.
	probe := func(o other, round int) bool {
		script := "cat " + filepath.Join(o.mnt, "f") + " >/dev/null"
		if o.output {
			script = "echo x > " + filepath.Join(o.mnt, "f") + " && cat " + filepath.Join(o.mnt, "f") + " >/dev/null"
		}
		done := make(chan error, 1)
		go func() { done <- exec.Command("sh", "-c", script).Run() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("round %d: %s: %v", round, o.mnt, err)
				return false
			}
			return true
		case <-time.After(20 * time.Second):
			t.Errorf("round %d: %s did not answer within 20 s while another mount's fsync was held", round, o.mnt)
			return false
		}
	}
	// Every other mount answers, for longer than the old code took to
	// pause the uploads (storeStopTimeout) and start freezing.
	ok := true
	for round, until := 0, time.Now().Add(storeStopTimeout+2*time.Second); ok && time.Now().Before(until); round++ {
		for _, o := range others {
			if ok = probe(o, round); !ok {
				break
			}
		}
	}
	select {
	case r := <-froze:
		f = &r
		t.Fatalf("FreezeForHandover returned while the fsync was held: %v", r.err)
	default:
	}
	if !ok {
		return
	}

	close(release)
	released = true
	// The fsync returns, then the freeze completes; dd's close that
	// follows may reach the mount frozen, so dd ends only once the
	// handover is aborted (thawed).
	r := <-froze
	f = &r
	if f.err != nil {
		t.Fatalf("FreezeForHandover after the fsync: %v", f.err)
	}
	f.h.Abort()
	f.h = nil
	if err := <-ddDone; err != nil {
		t.Fatalf("dd (the durable fsync): %v", err)
	}
	for _, o := range others {
		probe(o, -1)
	}
}
