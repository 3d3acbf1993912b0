package hdfs

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/colinmarc/hdfs/v2/hadoopconf"
	krb "github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Kerberos configures Kerberos authentication to a secured NameNode. It is
// used when any of its credential fields is set, or when the Hadoop
// configuration says hadoop.security.authentication=kerberos (then the
// ticket cache is the credential unless a keytab is given).
type Kerberos struct {
	// Principal is the client principal ("alice@EXAMPLE.COM"; without a
	// realm, krb5.conf's default_realm). Required with a keytab; with a
	// ticket cache, the cache's principal is used and this, when set,
	// must match it.
	Principal string
	// KeytabFile is a keytab holding Principal's keys. The client logs in
	// from it and logs in again before the ticket expires, for as long as
	// the backend is open.
	KeytabFile string
	// Keytab is a keytab's contents, used instead of KeytabFile (the node
	// daemon passes a mount's keytab this way, so it is never written to
	// disk by mlfsd).
	Keytab []byte `json:"-"`
	// CCacheFile is a ticket cache (as written by kinit). Empty:
	// $KRB5CCNAME (FILE: caches only), then /tmp/krb5cc_<uid>. The cache
	// is read again when its ticket nears expiry, so renewing it outside
	// mlfsd (kinit -R, k5start) keeps a mount working.
	CCacheFile string
	// Krb5Conf is the krb5.conf to use. Empty: $KRB5_CONFIG, then
	// /etc/krb5.conf.
	Krb5Conf string
	// ServicePrincipal is the NameNode's principal ("nn/_HOST@REALM";
	// _HOST becomes the NameNode's host name). Empty: the Hadoop
	// configuration's dfs.namenode.kerberos.principal.
	ServicePrincipal string
	// Required turns Kerberos on with the ticket cache even when nothing
	// else asks for it.
	Required bool
}

// GoString keeps %#v from printing the keytab's bytes.
func (k Kerberos) GoString() string { return k.String() }

// enabled reports whether some field asks for Kerberos.
func (k Kerberos) enabled() bool {
	return k.Required || k.Principal != "" || k.KeytabFile != "" || len(k.Keytab) > 0 || k.CCacheFile != ""
}

// String describes the configuration without key material.
func (k Kerberos) String() string {
	src := "ticket cache"
	if k.KeytabFile != "" {
		src = "keytab " + k.KeytabFile
	} else if len(k.Keytab) > 0 {
		src = "keytab (from secret)"
	}
	return fmt.Sprintf("kerberos principal %q via %s", k.Principal, src)
}

// renewMargin is how long before its TGT expires a ticket-cache client is
// rebuilt from the cache file, which may have been renewed meanwhile.
const renewMargin = 10 * time.Second

// kerberosAuth hands out a logged-in gokrb5 client for each new NameNode
// connection (a connection authenticates once, when it is made). A keytab
// client is renewed by gokrb5 and logs in again if that failed; a
// ticket-cache client is rebuilt from the cache file, which someone
// outside mlfsd renews, when its ticket nears expiry.
type kerberosAuth struct {
	cfg       *config.Config
	principal string // user@REALM, for errors
	realm     string
	spn       string // without @REALM, _HOST not yet replaced
	kdcs      string // for errors
	kt        *keytab.Keytab
	ccache    string

	mu  sync.Mutex
	cl  *krb.Client
	end time.Time // a ticket cache's TGT end time
}

// newKerberosAuth resolves the Kerberos configuration; it returns nil, nil
// when Kerberos is not in use.
func newKerberosAuth(k Kerberos, confDir string) (*kerberosAuth, error) {
	var conf hadoopconf.HadoopConf
	var err error
	if confDir != "" {
		conf, err = hadoopconf.Load(confDir)
	} else {
		conf, err = hadoopconf.LoadFromEnvironment()
	}
	if err != nil && k.enabled() {
		return nil, fmt.Errorf("hdfs: kerberos: reading the Hadoop configuration: %w", err)
	}
	if !k.enabled() && !strings.EqualFold(conf["hadoop.security.authentication"], "kerberos") {
		return nil, nil
	}
	a := &kerberosAuth{}
	cfgPath := k.Krb5Conf
	if cfgPath == "" {
		cfgPath = os.Getenv("KRB5_CONFIG")
	}
	if cfgPath == "" {
		cfgPath = "/etc/krb5.conf"
	}
	a.cfg, err = config.Load(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("hdfs: kerberos: reading krb5.conf %s (set KRB5_CONFIG or --hdfs-krb5-conf): %v", cfgPath, err)
	}
	spn := k.ServicePrincipal
	if spn == "" {
		spn = conf["dfs.namenode.kerberos.principal"]
	}
	if spn == "" {
		return nil, errors.New("hdfs: kerberos: the NameNode's principal is unknown: set dfs.namenode.kerberos.principal in hdfs-site.xml (HADOOP_CONF_DIR) or --hdfs-namenode-principal")
	}
	a.spn, _, _ = strings.Cut(spn, "@")

	if k.KeytabFile != "" || len(k.Keytab) > 0 {
		if k.Principal == "" {
			return nil, errors.New("hdfs: kerberos: a keytab needs a principal (--hdfs-principal user@REALM)")
		}
		user, realm := a.splitPrincipal(k.Principal)
		a.setPrincipal(user, realm)
		a.kt = keytab.New()
		if len(k.Keytab) > 0 {
			err = a.kt.Unmarshal(k.Keytab)
		} else {
			var b []byte
			if b, err = os.ReadFile(k.KeytabFile); err == nil {
				err = a.kt.Unmarshal(b)
			}
		}
		if err != nil {
			// The error is about the file's format or access, never its keys.
			return nil, fmt.Errorf("hdfs: kerberos: reading the keytab for %s: %v", a.principal, err)
		}
		return a, nil
	}

	a.ccache = k.CCacheFile
	if a.ccache == "" {
		a.ccache = os.Getenv("KRB5CCNAME")
	}
	if a.ccache == "" {
		a.ccache = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
	}
	if rest, ok := strings.CutPrefix(a.ccache, "FILE:"); ok {
		a.ccache = rest
	} else if i := strings.Index(a.ccache, ":"); i > 0 && !strings.HasPrefix(a.ccache, "/") {
		return nil, fmt.Errorf("hdfs: kerberos: ticket cache %q: only FILE: caches are supported (export KRB5CCNAME=FILE:/path and kinit)", a.ccache)
	}
	cc, err := a.loadCCache()
	if err != nil {
		return nil, err
	}
	user := strings.Join(cc.DefaultPrincipal.PrincipalName.NameString, "/")
	a.setPrincipal(user, cc.DefaultPrincipal.Realm)
	if k.Principal != "" {
		u, r := a.splitPrincipal(k.Principal)
		if u != user || r != cc.DefaultPrincipal.Realm {
			return nil, fmt.Errorf("hdfs: kerberos: ticket cache %s holds tickets for %s, not %s@%s", a.ccache, a.principal, u, r)
		}
	}
	return a, nil
}

func (a *kerberosAuth) splitPrincipal(p string) (user, realm string) {
	user, realm, ok := strings.Cut(p, "@")
	if !ok || realm == "" {
		realm = a.cfg.LibDefaults.DefaultRealm
	}
	return user, realm
}

func (a *kerberosAuth) setPrincipal(user, realm string) {
	a.realm = realm
	a.principal = user + "@" + realm
	a.kdcs = "(none configured)"
	if _, m, err := a.cfg.GetKDCs(realm, true); err == nil && len(m) > 0 {
		keys := make([]int, 0, len(m))
		for i := range m {
			keys = append(keys, i)
		}
		sort.Ints(keys)
		var ks []string
		for _, i := range keys {
			ks = append(ks, m[i])
		}
		a.kdcs = strings.Join(ks, ",")
	}
}

func (a *kerberosAuth) loadCCache() (*credentials.CCache, error) {
	cc, err := credentials.LoadCCache(a.ccache)
	if err != nil {
		return nil, fmt.Errorf("hdfs: kerberos: reading ticket cache %s (run kinit, or set KRB5CCNAME or --hdfs-keytab): %v", a.ccache, err)
	}
	return cc, nil
}

// describe names the principal and the KDC in an error.
func (a *kerberosAuth) describe(what string, err error) error {
	return fmt.Errorf("hdfs: kerberos: %s for %s (realm %s, KDC %s): %w", what, a.principal, a.realm, a.kdcs, err)
}

// client returns a client with a valid TGT, logging in or rereading the
// ticket cache when the current one is missing or about to expire.
func (a *kerberosAuth) client() (*krb.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kt == nil && a.cl != nil && time.Until(a.end) > renewMargin {
		return a.cl, nil
	}
	if a.kt != nil {
		if a.cl == nil {
			user, _, _ := strings.Cut(a.principal, "@")
			cl := krb.NewWithKeytab(user, a.realm, a.kt, a.cfg, krb.DisablePAFXFAST(true))
			if err := cl.Login(); err != nil {
				return nil, a.describe("login with keytab failed", err)
			}
			// gokrb5 renews the TGT in the background (or logs in again
			// from the keytab) at five sixths of its lifetime.
			a.cl = cl
			return cl, nil
		}
		// Logs in again if the background renewal could not (a KDC that
		// was down when it tried).
		if err := a.cl.AffirmLogin(); err != nil {
			return nil, a.describe("login with keytab failed", err)
		}
		return a.cl, nil
	}
	cc, err := a.loadCCache()
	if err != nil {
		return nil, err
	}
	tgt, ok := cc.GetEntry(krbtgt(cc.DefaultPrincipal.Realm))
	if !ok {
		return nil, a.describe("ticket cache "+a.ccache+" has no ticket-granting ticket", errors.New("run kinit"))
	}
	if !time.Now().Before(tgt.EndTime) {
		return nil, a.describe("ticket cache "+a.ccache, fmt.Errorf("the ticket expired at %s; run kinit (or kinit -R) again", tgt.EndTime.UTC().Format(time.RFC3339)))
	}
	cl, err := krb.NewFromCCache(cc, a.cfg, krb.DisablePAFXFAST(true))
	if err != nil {
		return nil, a.describe("ticket cache "+a.ccache, err)
	}
	a.cl, a.end = cl, tgt.EndTime
	if time.Until(a.end) <= renewMargin {
		// Nearly expired and not yet renewed outside: use it while it
		// lasts, read the cache again on the next connection.
		a.end = time.Now()
	}
	return cl, nil
}

// close stops the client's background renewal.
func (a *kerberosAuth) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cl != nil {
		a.cl.Destroy()
		a.cl = nil
	}
}

// krbtgt is the principal of a realm's ticket-granting service.
func krbtgt(realm string) types.PrincipalName {
	return types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}}
}
