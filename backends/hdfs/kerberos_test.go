package hdfs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/hdfs"
	"github.com/mlfsd/mlfsd/backends/hdfs/hdfsemu"
	"github.com/mlfsd/mlfsd/backends/hdfs/krbtest"
)

// securedEmulator starts a KDC and an emulator whose NameNode requires
// Kerberos as nn/127.0.0.1; it returns both and a keytab for alice. The
// emulator's superuser is nobody the tests log in as, so permission checks
// see alice as alice.
func securedEmulator(t *testing.T, kopt krbtest.Options, faults hdfsemu.Faults) (*krbtest.KDC, *hdfsemu.Server, string) {
	t.Helper()
	kdc := krbtest.Start(t, kopt)
	nnKeytab := kdc.AddPrincipal("nn/127.0.0.1")
	aliceKeytab := kdc.AddPrincipal("alice")
	k, err := hdfsemu.LoadKerberos(nnKeytab, "nn/127.0.0.1@"+kdc.Realm)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"data", "locked"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "data"), 0o777); err != nil {
		t.Fatal(err)
	}
	s := emulator(t, hdfsemu.Options{Root: root, Kerberos: k, Superuser: "hdfs", Faults: faults})
	return kdc, s, aliceKeytab
}

func kerberosOptions(kdc *krbtest.KDC) hdfs.Options {
	return hdfs.Options{Kerberos: hdfs.Kerberos{
		Krb5Conf:         kdc.Krb5Conf,
		ServicePrincipal: "nn/_HOST@" + kdc.Realm,
	}, Retries: 2}
}

func openErr(s *hdfsemu.Server, dir string, opt hdfs.Options) (backends.Backend, error) {
	u, err := backends.ParseURI("hdfs://" + s.Addr() + dir)
	if err != nil {
		return nil, err
	}
	return hdfs.New(context.Background(), u, opt, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func putGet(t *testing.T, b backends.Backend, key string, data []byte) {
	t.Helper()
	ctx := t.Context()
	w, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: int64(len(data))})
	if err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(ctx)
		t.Fatalf("write %s: %v", key, err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatalf("commit %s: %v", key, err)
	}
	r, err := b.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %s: %d bytes, err %v; want %d bytes back", key, len(got), err, len(data))
	}
}

// TestKerberosKeytabLogin: with a keytab from a real MIT KDC the backend
// authenticates to a secured NameNode, writes and reads, and the NameNode
// sees the principal's user (alice may not write in a root-owned 0755
// directory); a SIMPLE client is refused with the secured NameNode's error.
func TestKerberosKeytabLogin(t *testing.T) {
	t.Parallel()
	kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
	opt := kerberosOptions(kdc)
	opt.Kerberos.Principal = "alice@" + kdc.Realm
	opt.Kerberos.KeytabFile = keytab
	b, err := openErr(s, "/data/", opt)
	if err != nil {
		t.Fatalf("keytab login: %v", err)
	}
	defer b.Close()
	putGet(t, b, "model.bin", randData(1, 3<<20+7))
	// The keytab's contents work as well as its file (the node daemon
	// passes a mount's keytab this way).
	raw, err := os.ReadFile(keytab)
	if err != nil {
		t.Fatal(err)
	}
	opt.Kerberos.KeytabFile, opt.Kerberos.Keytab = "", raw
	b2, err := openErr(s, "/", opt)
	if err != nil {
		t.Fatalf("login with keytab bytes: %v", err)
	}
	defer b2.Close()
	if _, err := b2.Stat(t.Context(), "data/model.bin"); err != nil {
		t.Errorf("stat through a second login: %v", err)
	}
	if err := b2.(backends.DirMaker).MakeDir(t.Context(), "locked/sub"); !errors.Is(err, backends.ErrPermission) {
		t.Errorf("alice making a directory in a root-owned 0755 one: %v, want a permission error", err)
	}

	_, err = openErr(s, "/", hdfs.Options{User: "alice", Retries: 1})
	if err == nil || !strings.Contains(err.Error(), "SIMPLE authentication is not enabled") || !errors.Is(err, backends.ErrPermission) {
		t.Errorf("SIMPLE client against a secured NameNode: %v, want it refused", err)
	}
}

// TestKerberosTicketCache: a ticket cache written by MIT kinit logs in.
func TestKerberosTicketCache(t *testing.T) {
	t.Parallel()
	kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
	cc := kdc.Kinit("alice@"+kdc.Realm, keytab)
	opt := kerberosOptions(kdc)
	opt.Kerberos.CCacheFile = "FILE:" + cc
	b, err := openErr(s, "/data/", opt)
	if err != nil {
		t.Fatalf("ticket cache login: %v", err)
	}
	defer b.Close()
	putGet(t, b, "ckpt/step-1", randData(2, 100<<10))
	// A principal that is not the cache's is refused by name.
	opt.Kerberos.Principal = "bob@" + kdc.Realm
	if _, err := openErr(s, "/data/", opt); err == nil || !strings.Contains(err.Error(), "alice@"+kdc.Realm) {
		t.Errorf("cache of alice used as bob: %v", err)
	}
}

// checkLoginError asserts that err names the principal and the KDC and
// holds no key material from the keytab.
func checkLoginError(t *testing.T, err error, kdc *krbtest.KDC, keytab string, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("login succeeded, want an error (%s)", want)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	for _, s := range []string{"alice@" + kdc.Realm, kdc.Addr, want} {
		if !strings.Contains(msg, s) {
			t.Errorf("error does not say %q: %s", s, msg)
		}
	}
	raw, _ := os.ReadFile(keytab)
	// Keys are 16 or 32 bytes; look for any 16-byte window of the keytab.
	for i := 0; i+16 <= len(raw); i += 4 {
		w := raw[i : i+16]
		if strings.Contains(msg, hex.EncodeToString(w)) || strings.Contains(msg, base64.StdEncoding.EncodeToString(w)[:20]) || strings.Contains(msg, string(w)) {
			t.Fatalf("error holds keytab bytes at %d: %s", i, msg)
		}
	}
}

// TestKerberosLoginErrors: a rotated (wrong) keytab, an expired ticket
// cache, a KDC that is down and a KDC whose clock is off each fail New
// with an error naming the principal and the KDC, and no key material.
func TestKerberosLoginErrors(t *testing.T) {
	t.Parallel()
	t.Run("wrong keytab", func(t *testing.T) {
		t.Parallel()
		kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
		kdc.Keytab("alice") // new keys: the first keytab is stale
		opt := kerberosOptions(kdc)
		opt.Kerberos.Principal, opt.Kerberos.KeytabFile = "alice", keytab
		_, err := openErr(s, "/", opt)
		checkLoginError(t, err, kdc, keytab, "login with keytab failed")
	})
	t.Run("expired cache", func(t *testing.T) {
		t.Parallel()
		kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
		cc := kdc.KinitLifetime("alice@"+kdc.Realm, keytab, "2s")
		kdc.WaitExpired(cc)
		opt := kerberosOptions(kdc)
		opt.Kerberos.CCacheFile = cc
		_, err := openErr(s, "/", opt)
		checkLoginError(t, err, kdc, keytab, "expired")
	})
	t.Run("KDC down", func(t *testing.T) {
		t.Parallel()
		kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
		kdc.Stop()
		kdc.WaitDown()
		opt := kerberosOptions(kdc)
		opt.Kerberos.Principal, opt.Kerberos.KeytabFile = "alice", keytab
		_, err := openErr(s, "/", opt)
		checkLoginError(t, err, kdc, keytab, "login with keytab failed")
	})
	t.Run("namenode keytab rotated", func(t *testing.T) {
		t.Parallel()
		// The NameNode's keys change under the emulator: it can no longer
		// decrypt the service tickets the KDC issues, and refuses them.
		kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
		kdc.Keytab("nn/127.0.0.1")
		opt := kerberosOptions(kdc)
		opt.Kerberos.Principal, opt.Kerberos.KeytabFile = "alice", keytab
		_, err := openErr(s, "/", opt)
		checkLoginError(t, err, kdc, keytab, "authenticating to the NameNode as nn/_HOST")
		if !errors.Is(err, backends.ErrPermission) {
			t.Errorf("a NameNode refusing the ticket: %v, want ErrPermission (not transient)", err)
		}
	})
	t.Run("clock skew", func(t *testing.T) {
		t.Parallel()
		kdc, s, keytab := securedEmulator(t, krbtest.Options{ClockOffset: 30 * time.Minute}, hdfsemu.Faults{})
		opt := kerberosOptions(kdc)
		opt.Kerberos.Principal, opt.Kerberos.KeytabFile = "alice", keytab
		_, err := openErr(s, "/", opt)
		checkLoginError(t, err, kdc, keytab, "clock skew")
	})
}

// TestKerberosTicketCacheReread: a ticket cache renewed outside mlfsd
// (kinit again into the same file) is read again when the ticket the
// backend started with expires, so connections made after that still
// authenticate.
func TestKerberosTicketCacheReread(t *testing.T) {
	t.Parallel()
	kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
	cc := kdc.KinitLifetime("alice@"+kdc.Realm, keytab, "15s")
	expires := time.Now().Add(15 * time.Second)
	opt := kerberosOptions(kdc)
	opt.Kerberos.CCacheFile = cc
	b, err := openErr(s, "/data/", opt)
	if err != nil {
		t.Fatalf("ticket cache login: %v", err)
	}
	defer b.Close()
	putGet(t, b, "before", randData(3, 10<<10))
	kdc.KinitInto("alice@"+kdc.Realm, keytab, cc) // the renewal outside mlfsd
	// The first ticket's end is a point in time: the behaviour under test.
	time.Sleep(time.Until(expires.Add(time.Second)))
	// Each write takes a NameNode connection of its own; two at once need
	// a new one, which must authenticate with the renewed cache.
	done := make(chan error, 2)
	for i := range 2 {
		go func() {
			done <- writeKey(t.Context(), b, fmt.Sprintf("after-%d", i), randData(int64(4+i), 10<<10))
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("write after the first ticket expired: %v", err)
		}
	}
}

// TestKerberosFromHadoopConf: with nothing but the environment a Hadoop
// client uses (HADOOP_CONF_DIR's core-site.xml saying
// hadoop.security.authentication=kerberos and hdfs-site.xml naming the
// NameNode's principal with _HOST, KRB5_CONFIG, KRB5CCNAME from kinit),
// the backend authenticates with Kerberos. Not parallel: it sets the
// environment.
func TestKerberosFromHadoopConf(t *testing.T) {
	kdc, s, keytab := securedEmulator(t, krbtest.Options{}, hdfsemu.Faults{})
	conf := t.TempDir()
	site := func(name, key, value string) {
		x := fmt.Sprintf("<configuration><property><name>%s</name><value>%s</value></property></configuration>\n", key, value)
		if err := os.WriteFile(filepath.Join(conf, name), []byte(x), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	site("core-site.xml", "hadoop.security.authentication", "kerberos")
	site("hdfs-site.xml", "dfs.namenode.kerberos.principal", "nn/_HOST@"+kdc.Realm)
	t.Setenv("HADOOP_CONF_DIR", conf)
	t.Setenv("KRB5_CONFIG", kdc.Krb5Conf)
	t.Setenv("KRB5CCNAME", "FILE:"+kdc.Kinit("alice@"+kdc.Realm, keytab))
	b, err := openErr(s, "/data/", hdfs.Options{})
	if err != nil {
		t.Fatalf("login from the Hadoop configuration and the environment: %v", err)
	}
	defer b.Close()
	putGet(t, b, "from-conf", randData(9, 5<<10))
}
