package node

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/backends/hdfs/krbtest"
)

// TestMountWithKerberosCredentials: a mount request whose credentials
// carry a principal and its keytab mounts a Kerberized HDFS channel (a
// real MIT KDC, the emulator as a secured NameNode) and reads through it;
// the keytab is in no file the node wrote. Without the keytab the secured
// NameNode refuses the mount; a keytab without its principal is refused
// before anything is opened; a request may not name a keytab file on the
// node (a node-wide option).
func TestMountWithKerberosCredentials(t *testing.T) {
	kdc := krbtest.Start(t, krbtest.Options{})
	nnKeytab := kdc.AddPrincipal("nn/127.0.0.1")
	aliceKeytab := kdc.AddPrincipal("alice")
	k, err := hdfsemu.LoadKerberos(nnKeytab, "nn/127.0.0.1@"+kdc.Realm)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	data := randomBytes(t, 3<<20)
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "data", "shard.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := hdfsemu.New(hdfsemu.Options{Root: root, Kerberos: k, Superuser: "hdfs"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	t.Setenv("KRB5_CONFIG", kdc.Krb5Conf) // the daemon's environment
	stateDir := t.TempDir()
	n := newTestNode(t, stateDir)
	raw, err := os.ReadFile(aliceKeytab)
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string]string{"hdfs-namenode-principal": "nn/_HOST@" + kdc.Realm, "hdfs-retries": "1"}
	creds := Credentials{HDFSPrincipal: "alice@" + kdc.Realm, HDFSKeytab: base64.StdEncoding.EncodeToString(raw)}
	uri := "hdfs://" + s.Addr() + "/data/"
	ctx := t.Context()

	if _, err := n.Mount(ctx, MountRequest{URI: uri, Target: t.TempDir(), ReadOnly: true, Options: opts,
		Credentials: Credentials{HDFSKeytab: creds.HDFSKeytab}}); err == nil || !strings.Contains(err.Error(), "principal") || strings.Contains(err.Error(), creds.HDFSKeytab) {
		t.Errorf("a keytab without its principal: %v", err)
	}
	if _, err := n.Mount(ctx, MountRequest{URI: uri, Target: t.TempDir(), ReadOnly: true, Options: opts}); err == nil || !strings.Contains(err.Error(), "SIMPLE authentication is not enabled") {
		t.Errorf("a mount without Kerberos credentials on a secured NameNode: %v", err)
	}
	// A request names no keytab file on the node: that is the node's.
	if _, err := n.Mount(ctx, MountRequest{URI: uri, Target: t.TempDir(), ReadOnly: true,
		Options: map[string]string{"hdfs-keytab": aliceKeytab, "hdfs-principal": "alice"}}); err == nil || !strings.Contains(err.Error(), "hdfs-keytab") {
		t.Errorf("a mount request naming a keytab file: %v", err)
	}

	mnt := t.TempDir()
	if _, err := n.Mount(ctx, MountRequest{URI: uri, Target: mnt, ReadOnly: true, Options: opts, Credentials: creds}); err != nil {
		t.Fatalf("mount with a keytab in the credentials: %v", err)
	}
	if got := readFile(t, filepath.Join(mnt, "shard.bin")); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes through the Kerberized mount, want the %d seeded", len(got), len(data))
	}
	// The node's state names the mount but holds no keytab.
	files := 0
	filepath.WalkDir(stateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, _ := os.ReadFile(p)
		if !bytes.Contains(b, []byte(s.Addr())) {
			t.Logf("%s does not name the mount", p)
		}
		if bytes.Contains(b, raw[len(raw)-32:]) || bytes.Contains(b, []byte(creds.HDFSKeytab[:40])) {
			t.Errorf("%s holds the keytab", p)
		}
		return nil
	})
	if files == 0 {
		t.Error("the node wrote no state to check")
	}
	if err := n.Unmount(ctx, mnt); err != nil {
		t.Fatal(err)
	}
}
