package node

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
)

// tenantKeys are the emulator's keys of the tenant tests: "owner" may list
// and read train/, "lister" may only list it, "reader" list and read it.
func tenantKeys() []ossemu.Key {
	rule := func(a ...ossemu.Action) []ossemu.Rule {
		return []ossemu.Rule{{Bucket: "bkt", Prefix: "train/", Actions: a}}
	}
	return []ossemu.Key{
		{ID: "owner", Secret: "owner-secret", Allow: rule(ossemu.ActionList, ossemu.ActionGet)},
		{ID: "lister", Secret: "lister-secret", Allow: rule(ossemu.ActionList)},
		{ID: "reader", Secret: "reader-secret", Allow: rule(ossemu.ActionList, ossemu.ActionGet)},
	}
}

// tenantStore starts an emulator with tenantKeys and two objects under
// bkt/train/, and returns it, its endpoint and the objects by name.
func tenantStore(t *testing.T) (*ossemu.Server, string, map[string][]byte) {
	t.Helper()
	emu, endpoint, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{Keys: tenantKeys()})
	files := map[string][]byte{"small.bin": randomBytes(t, 300<<10), "big.bin": randomBytes(t, 6<<20+3)}
	if err := os.MkdirAll(filepath.Join(root, "bkt", "train"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, "bkt", "train", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return emu, endpoint, files
}

// mountAs mounts oss://bkt/train/ read-only at a new directory with the
// credentials of emulator key id, and more options.
func mountAs(t *testing.T, n *Node, endpoint, id string, opts map[string]string) string {
	t.Helper()
	o := map[string]string{"oss-endpoint": endpoint}
	for k, v := range opts {
		o[k] = v
	}
	mnt := t.TempDir()
	req := MountRequest{URI: "oss://bkt/train/", Target: mnt, ReadOnly: true, Options: o,
		Credentials: Credentials{OSSAccessKeyID: id, OSSAccessKeySecret: id + "-secret"}}
	if _, err := n.Mount(t.Context(), req); err != nil {
		t.Fatalf("mount as %s: %v", id, err)
	}
	return mnt
}

// catDenied reads path in another process and requires it to fail with
// EACCES and print no byte of it.
func catDenied(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("cat", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil || len(out) != 0 || !strings.Contains(stderr.String(), "Permission denied") {
		t.Fatalf("cat %s: %d bytes out, %v, %q; want no bytes and Permission denied", path, len(out), err, stderr.String())
	}
}

// requests returns the emulator's GET and HEAD counts.
func requests(emu *ossemu.Server) (gets, heads int64) {
	st := emu.Stats()
	return st["GetObject"], st["HeadObject"]
}

// TestCacheHitsAuthorizedPerIdentity: three mounts of one OSS prefix on
// one node, each with its own key, share the node's cache. The owner
// reads the files cold (no HEAD: its GETs authorize it) and again (no
// request at all). "lister", whose key may list the prefix but not read
// it, sees the files and gets EACCES and no bytes for each, although the
// node holds them. "reader", whose key may read, is served from the cache
// after one HEAD per file, and reads them again without any request.
func TestCacheHitsAuthorizedPerIdentity(t *testing.T) {
	emu, endpoint, files := tenantStore(t)
	n := newTestNode(t, "")
	owner := mountAs(t, n, endpoint, "owner", nil)
	lister := mountAs(t, n, endpoint, "lister", nil)
	reader := mountAs(t, n, endpoint, "reader", nil)

	var total int64
	for name, data := range files {
		total += int64(len(data))
		if got := readFile(t, filepath.Join(owner, name)); !bytes.Equal(got, data) {
			t.Fatalf("owner reads %s: %d bytes, want %d", name, len(got), len(data))
		}
	}
	if _, heads := requests(emu); heads != 0 {
		t.Fatalf("the owner reading its data cold sent %d HEADs; its GETs authorize it", heads)
	}
	// The copies reach the disk tier behind the reads: wait for them, so
	// that the others find every block cached.
	c, err := n.sharedCache()
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, func() bool { return c.Stats().DiskBytes >= total }, "the disk tier to hold the %d bytes read", total)

	sent := func() int64 { return emu.Stats()["requests"] }
	for name := range files {
		if _, err := os.Stat(filepath.Join(lister, name)); err != nil {
			t.Fatalf("lister, who may list, does not see %s: %v", name, err)
		}
	}
	before := sent()
	for name := range files {
		catDenied(t, filepath.Join(lister, name))
	}
	// One request per file, refused: the HEAD that asks for lister.
	if d, denied := sent()-before, emu.Stats()["AccessDenied"]; d != int64(len(files)) || denied != int64(len(files)) {
		t.Fatalf("lister's reads of cached files sent %d requests, %d refused; want one HEAD per file, refused", d, denied)
	}
	if st := c.Stats(); st.AuthRequests != int64(len(files)) || st.AuthDenied != int64(len(files)) {
		t.Fatalf("cache: %d authorization HEADs, %d refused; want %d and %d", st.AuthRequests, st.AuthDenied, len(files), len(files))
	}

	for name := range files { // its listing, before counting
		if _, err := os.Stat(filepath.Join(reader, name)); err != nil {
			t.Fatal(err)
		}
	}
	before = sent()
	_, heads0 := requests(emu)
	for i := 0; i < 2; i++ {
		for name, data := range files {
			if got := readFile(t, filepath.Join(reader, name)); !bytes.Equal(got, data) {
				t.Fatalf("reader reads %s: %d bytes, want %d", name, len(got), len(data))
			}
		}
	}
	if _, heads := requests(emu); sent()-before != int64(len(files)) || heads-heads0 != int64(len(files)) {
		t.Fatalf("reader's two reads of cached files sent %d requests, %d HEADs; want one HEAD per file", sent()-before, heads-heads0)
	}

	gets0, heads0 := requests(emu)
	for name, data := range files {
		if got := readFile(t, filepath.Join(owner, name)); !bytes.Equal(got, data) {
			t.Fatalf("owner reads %s again: %d bytes", name, len(got))
		}
	}
	if gets, heads := requests(emu); gets != gets0 || heads != heads0 {
		t.Fatalf("the owner's second read sent %d GETs and %d HEADs; want none", gets-gets0, heads-heads0)
	}
}

// TestSharedTierHitsAuthorizedPerIdentity: blocks one node put in the
// shared tier are served through another node only to mounts the store
// authorizes. The owner reads on node 1 and fills the tier; on node 2,
// whose own cache holds nothing, "lister" gets EACCES and no bytes (its
// HEAD refused, no GET sent), and "reader" is served from the tier after
// one HEAD per file, with no GET.
func TestSharedTierHitsAuthorizedPerIdentity(t *testing.T) {
	emu, endpoint, files := tenantStore(t)
	tierDir := t.TempDir()
	tier := map[string]string{"shared-cache": "nas://" + tierDir + "/"}
	// Both nodes hold the cluster's one tier key.
	key := writeTierKey(t)
	withKey := func(s *Settings) { s.Shared.KeyFile = key }
	n1, n2 := newTestNodeWith(t, "", withKey), newTestNodeWith(t, "", withKey)
	owner := mountAs(t, n1, endpoint, "owner", tier)
	for name, data := range files {
		if got := readFile(t, filepath.Join(owner, name)); !bytes.Equal(got, data) {
			t.Fatalf("owner reads %s: %d bytes, want %d", name, len(got), len(data))
		}
	}
	if _, heads := requests(emu); heads != 0 {
		t.Fatalf("the owner reading its data cold through the tier sent %d HEADs", heads)
	}
	n1.shared.mu.Lock()
	st := n1.shared.tiers[tier["shared-cache"]]
	n1.shared.mu.Unlock()
	if err := st.t.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// (Each test node's cleanup wants no mount left under the test's
	// directories: node 1 is done.)
	if err := n1.Unmount(t.Context(), owner); err != nil {
		t.Fatal(err)
	}

	lister := mountAs(t, n2, endpoint, "lister", tier)
	reader := mountAs(t, n2, endpoint, "reader", tier)
	for _, mnt := range []string{lister, reader} {
		for name := range files { // the listings, before counting
			if _, err := os.Stat(filepath.Join(mnt, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	gets0, _ := requests(emu)
	denied0 := emu.Stats()["AccessDenied"]
	for name := range files {
		catDenied(t, filepath.Join(lister, name))
	}
	if gets, _ := requests(emu); gets != gets0 || emu.Stats()["AccessDenied"] == denied0 {
		t.Fatalf("lister's reads sent %d GETs and had %d requests refused; want no GET and its HEADs refused", gets-gets0, emu.Stats()["AccessDenied"]-denied0)
	}

	gets0, heads0 := requests(emu)
	for name, data := range files {
		if got := readFile(t, filepath.Join(reader, name)); !bytes.Equal(got, data) {
			t.Fatalf("reader reads %s through the tier: %d bytes, want %d", name, len(got), len(data))
		}
	}
	if gets, heads := requests(emu); gets != gets0 || heads != heads0+int64(len(files)) {
		t.Fatalf("reader's reads through the tier sent %d GETs and %d HEADs; want none and one HEAD per file", gets-gets0, heads-heads0)
	}
}
