// Package krbtest runs a throwaway MIT Kerberos KDC (Debian's krb5-kdc)
// for tests: a realm in a temporary directory, served on a loopback port,
// with principals and keytabs made by kadmin.local and tickets by kinit.
// It fails the test, never skips it, when the KDC cannot start.
package krbtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Options configures a KDC.
type Options struct {
	// Realm is the realm's name (default MLFSD.TEST).
	Realm string
	// TicketLifetime caps every ticket's lifetime (default 10m); the
	// krb5.conf written for clients asks for it too.
	TicketLifetime time.Duration
	// ClockOffset runs the KDC with its clock this far off (through
	// libfaketime), to test clock skew.
	ClockOffset time.Duration
}

// KDC is a running KDC.
type KDC struct {
	// Realm is the realm's name.
	Realm string
	// Addr is the KDC's loopback address (TCP and UDP).
	Addr string
	// Krb5Conf is a krb5.conf for clients of this realm.
	Krb5Conf string
	// Dir holds the database, configuration and logs.
	Dir string

	env []string
	cmd *exec.Cmd
	t   testing.TB
}

// Start starts a KDC for the test; it is stopped at the test's end.
func Start(t testing.TB, opt Options) *KDC {
	t.Helper()
	if opt.Realm == "" {
		opt.Realm = "MLFSD.TEST"
	}
	if opt.TicketLifetime <= 0 {
		opt.TicketLifetime = 10 * time.Minute
	}
	for _, p := range []string{"krb5kdc", "kdb5_util", "kadmin.local", "kinit"} {
		if _, err := lookPath(p); err != nil {
			t.Fatalf("krbtest: %s not found (install krb5-kdc, krb5-admin-server and krb5-user, listed in .ci/apt-packages.txt): %v", p, err)
		}
	}
	dir := t.TempDir()
	k := &KDC{Realm: opt.Realm, Dir: dir, t: t}
	k.Addr = freeAddr(t)
	_, port, _ := net.SplitHostPort(k.Addr)
	life := fmt.Sprintf("%ds", int(opt.TicketLifetime.Seconds()))
	kdcConf := fmt.Sprintf(`[kdcdefaults]
 kdc_listen = 127.0.0.1:%[1]s
 kdc_tcp_listen = 127.0.0.1:%[1]s
[realms]
 %[2]s = {
  database_name = %[3]s/principal
  key_stash_file = %[3]s/stash
  acl_file = %[3]s/kadm5.acl
  max_life = %[4]s
  max_renewable_life = 0
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }
[logging]
 kdc = FILE:%[3]s/kdc.log
 admin_server = FILE:%[3]s/kadmin.log
`, port, opt.Realm, dir, life)
	k.Krb5Conf = filepath.Join(dir, "krb5.conf")
	krb5Conf := fmt.Sprintf(`[libdefaults]
 default_realm = %[1]s
 dns_lookup_realm = false
 dns_lookup_kdc = false
 rdns = false
 udp_preference_limit = 1
 ticket_lifetime = %[3]s
 default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
[realms]
 %[1]s = {
  kdc = %[2]s
 }
`, opt.Realm, k.Addr, life)
	for name, body := range map[string]string{"kdc.conf": kdcConf, "krb5.conf": krb5Conf, "kadm5.acl": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k.env = append(os.Environ(), "KRB5_CONFIG="+k.Krb5Conf, "KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"))
	// The master password protects only this throwaway database.
	k.run("kdb5_util", "create", "-s", "-r", opt.Realm, "-P", "mlfsd-test-master")
	// Every ticket, the TGT included, gets the short lifetime.
	k.run("kadmin.local", "-r", opt.Realm, "-q", fmt.Sprintf("modprinc -maxlife %s krbtgt/%s@%s", life, opt.Realm, opt.Realm))

	prog, err := lookPath("krb5kdc")
	if err != nil {
		t.Fatalf("krbtest: %v", err)
	}
	k.cmd = exec.Command(prog, "-n", "-r", opt.Realm)
	k.cmd.Env = k.env
	if opt.ClockOffset != 0 {
		// libfaketime in the KDC's process only: the KDC's clock is off,
		// the test's is not.
		lib := "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
		if m, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1"); len(m) > 0 {
			lib = m[0]
		}
		if !fileExists(lib) {
			t.Fatalf("krbtest: %s not found (install faketime, listed in .ci/apt-packages.txt)", lib)
		}
		k.cmd.Env = append(k.cmd.Env, "LD_PRELOAD="+lib, fmt.Sprintf("FAKETIME=%+ds", int(opt.ClockOffset.Seconds())))
	}
	// Output goes to a file, not a pipe: Wait must not wait on anything
	// but the KDC.
	outFile := filepath.Join(dir, "krb5kdc.out")
	of, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	k.cmd.Stdout, k.cmd.Stderr = of, of
	out := fileString(outFile)
	if err := k.cmd.Start(); err != nil {
		t.Fatalf("krbtest: starting krb5kdc: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- k.cmd.Wait() }()
	t.Cleanup(func() {
		k.Stop()
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
			t.Logf("krb5kdc output:\n%s\nkdc.log:\n%s", out(), log)
		}
	})
	deadline := time.Now().Add(2 * time.Minute) // a hang guard; the port opens in well under a second
	for {
		c, err := net.DialTimeout("tcp", k.Addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
			t.Fatalf("krbtest: krb5kdc exited before serving %s: %v\n%s\n%s", k.Addr, err, out(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("krbtest: krb5kdc does not listen on %s", k.Addr)
		}
	}
	return k
}

func fileString(p string) func() string {
	return func() string {
		b, _ := os.ReadFile(p)
		return string(b)
	}
}

// Stop stops the KDC (a test of a KDC that is down calls it early).
func (k *KDC) Stop() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = k.cmd.Process.Kill()
	}
}

// AddPrincipal creates principal (with a random key) in the realm and
// writes its keys to a new keytab, whose path it returns.
func (k *KDC) AddPrincipal(principal string) string {
	k.t.Helper()
	if !strings.Contains(principal, "@") {
		principal += "@" + k.Realm
	}
	k.run("kadmin.local", "-r", k.Realm, "-q", "addprinc -randkey "+principal)
	return k.Keytab(principal)
}

// Keytab writes principal's keys to a new keytab and returns its path.
// ktadd makes new keys: keytabs written before for principal stop working,
// as when an administrator rotates them.
func (k *KDC) Keytab(principal string) string {
	k.t.Helper()
	if !strings.Contains(principal, "@") {
		principal += "@" + k.Realm
	}
	f, err := os.CreateTemp(k.Dir, "keytab-*")
	if err != nil {
		k.t.Fatal(err)
	}
	f.Close()
	os.Remove(f.Name()) // ktadd appends to an existing keytab, but wants a keytab there
	k.run("kadmin.local", "-r", k.Realm, "-q", fmt.Sprintf("ktadd -k %s %s", f.Name(), principal))
	return f.Name()
}

// Kinit gets a TGT for principal from its keytab into a new ticket cache
// (with the kinit program) and returns the cache's path.
func (k *KDC) Kinit(principal, keytab string) string {
	k.t.Helper()
	cc := filepath.Join(k.Dir, "ccache-"+strings.NewReplacer("/", "_", "@", "_").Replace(principal)+fmt.Sprint(time.Now().UnixNano()))
	k.run("kinit", "-k", "-t", keytab, "-c", "FILE:"+cc, principal)
	return cc
}

// KinitLifetime is Kinit with a ticket lifetime (kinit -l, e.g. "2s").
func (k *KDC) KinitLifetime(principal, keytab, lifetime string) string {
	k.t.Helper()
	cc := filepath.Join(k.Dir, "ccache-short-"+fmt.Sprint(time.Now().UnixNano()))
	k.run("kinit", "-l", lifetime, "-k", "-t", keytab, "-c", "FILE:"+cc, principal)
	return cc
}

// KinitInto gets a new TGT into an existing ticket cache, as a renewal
// outside mlfsd (kinit, k5start) does.
func (k *KDC) KinitInto(principal, keytab, ccache string) {
	k.t.Helper()
	k.run("kinit", "-k", "-t", keytab, "-c", "FILE:"+ccache, principal)
}

// WaitExpired waits until klist reports the cache's tickets expired.
func (k *KDC) WaitExpired(ccache string) {
	k.t.Helper()
	prog, err := lookPath("klist")
	if err != nil {
		k.t.Fatalf("krbtest: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute) // a hang guard
	for {
		cmd := exec.Command(prog, "-s", "-c", "FILE:"+ccache)
		cmd.Env = k.env
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return // klist -s exits 1 once no ticket is valid
			}
			k.t.Fatalf("krbtest: klist: %v", err)
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("krbtest: the tickets in %s never expired", ccache)
		}
		time.Sleep(100 * time.Millisecond) // polling the cache's state
	}
}

// WaitDown waits until the KDC no longer accepts connections (after Stop).
func (k *KDC) WaitDown() {
	k.t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		c, err := net.DialTimeout("tcp", k.Addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			k.t.Fatalf("krbtest: the KDC still listens on %s", k.Addr)
		}
		time.Sleep(20 * time.Millisecond) // polling the port's state
	}
}

// Log is the KDC's log so far (one line per request: AS_REQ, TGS_REQ).
func (k *KDC) Log() string {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
	return string(b)
}

// Env is the environment the KDC's tools run with (KRB5_CONFIG set).
func (k *KDC) Env() []string { return k.env }

func (k *KDC) run(name string, args ...string) {
	k.t.Helper()
	prog, err := lookPath(name)
	if err != nil {
		k.t.Fatalf("krbtest: %v", err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = k.env
	if out, err := cmd.CombinedOutput(); err != nil {
		k.t.Fatalf("krbtest: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// lookPath finds a program, also in the sbin directories a non-root PATH
// may lack.
func lookPath(p string) (string, error) {
	if f, err := exec.LookPath(p); err == nil {
		return f, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if f := filepath.Join(d, p); fileExists(f) {
			return f, nil
		}
	}
	return exec.LookPath(p)
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// freeAddr picks a free loopback port for TCP and UDP.
func freeAddr(t testing.TB) string {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("krbtest: no free loopback port for TCP and UDP")
	return ""
}
