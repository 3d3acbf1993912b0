// Package hdfs is the mlfsd backend for hdfs:// URIs, over the
// github.com/colinmarc/hdfs/v2 client (Hadoop RPC to the NameNode,
// DataTransferProtocol to the DataNodes; SIMPLE or Kerberos authentication,
// see Kerberos).
//
// Keys map to paths under the URI's directory. Directories are real HDFS
// directories and list as objects with IsDir set. The version token is
// file id, modification time and size: HDFS never reuses a file id, so an
// overwrite (a new file renamed into place) always changes it.
//
// Writes stream into a temporary file in a hidden staging directory
// (".mlfsd-staging") under the root and are renamed into place on Commit,
// so nothing is visible under a key until its Commit returns, and an
// aborted write leaves no file and no directory behind. The staging
// directory never appears in listings.
//
// Transient failures (a NameNode or DataNode connection refused, reset or
// dropped, a retriable or standby NameNode, safe mode) are retried a
// bounded number of times with capped exponential backoff; a read that
// loses its DataNode mid-stream reopens the file at the offset reached, and
// fails with ErrVersionMismatch if the file changed meanwhile. A streaming
// write cannot be resumed by the client library once a block pipeline
// fails, so a failed Write or Commit reports ErrTransient and leaves nothing
// behind; the caller (the write-back queue) uploads the file again.
package hdfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"
	"github.com/colinmarc/hdfs/v2/hadoopconf"

	"github.com/mlfsd/mlfsd/backends"
)

// DefaultPort is the NameNode RPC port used when an address has none.
const DefaultPort = "8020"

// DefaultConnectTimeout is Options.ConnectTimeout's default.
const DefaultConnectTimeout = 10 * time.Second

// stagingDir is the hidden directory under the root that holds writes in
// progress.
const stagingDir = ".mlfsd-staging"

// Options configures the backend.
type Options struct {
	// User is the HDFS user to act as. Empty: $HADOOP_USER_NAME, then the
	// user running mlfsd.
	User string
	// Namenodes, when set, replaces the NameNode addresses of every URI
	// (for example the two NameNodes of an HA pair).
	Namenodes []string
	// ConfDir is a Hadoop configuration directory (core-site.xml,
	// hdfs-site.xml) used to resolve a URI host without a port as an HA
	// nameservice (dfs.ha.namenodes.<name>) or a configured NameNode.
	// Empty: $HADOOP_CONF_DIR, then $HADOOP_HOME/etc/hadoop.
	ConfDir string
	// Retries is the number of attempts for an operation that fails
	// transiently (default 5).
	Retries int
	// RetryBackoff is the first pause between attempts (default 100ms);
	// it doubles up to 2s.
	RetryBackoff time.Duration
	// IOTimeout bounds each network read or write (default 60s), so a
	// silent NameNode or DataNode cannot hang a call forever.
	IOTimeout time.Duration
	// DialTimeout bounds connecting to a NameNode or DataNode (default
	// ConnectTimeout).
	DialTimeout time.Duration
	// ConnectTimeout bounds the wait for a NameNode's first answer on a
	// new connection (default DefaultConnectTimeout); New reports a
	// NameNode that accepts connections but never answers by name after
	// this long, instead of hanging for IOTimeout times the retries.
	ConnectTimeout time.Duration
	// Connections is the number of NameNode connections shared by
	// metadata calls and reads (default 4). The client library serves one
	// call at a time per connection, so parallel readers need several.
	// Every write has a connection of its own besides.
	Connections int
	// UseDatanodeHostname connects to DataNodes by host name instead of IP
	// (dfs.client.use.datanode.hostname).
	UseDatanodeHostname bool
	// Kerberos authenticates to a secured cluster; it is also turned on by
	// hadoop.security.authentication=kerberos in the Hadoop configuration.
	Kerberos Kerberos
}

func (o *Options) defaults() {
	if o.Retries <= 0 {
		o.Retries = 5
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 100 * time.Millisecond
	}
	if o.IOTimeout <= 0 {
		o.IOTimeout = 60 * time.Second
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = o.ConnectTimeout
	}
	if o.Connections <= 0 {
		o.Connections = 4
	}
}

// Compile-time checks of the optional interfaces the backend provides.
var (
	_ backends.Renamer  = (*backend)(nil)
	_ backends.Appender = (*backend)(nil)
	_ backends.DirMaker = (*backend)(nil)
)

type backend struct {
	id     string
	dataID string // see DataID
	root   string // absolute HDFS path of the root, no trailing '/' ("" for "/")
	addrs  []string
	user   string
	// prefer is the index in addrs of the NameNode that answered last:
	// new clients try it first, so a silent NameNode earlier in the list
	// costs its connect timeout once, not on every new client.
	prefer atomic.Int32
	opt    Options
	log    *slog.Logger
	krb    *kerberosAuth // nil: SIMPLE authentication

	// mu guards clients, next, idle and closed. The shared clients serve
	// metadata calls and reads, round robin; one is replaced (nil until
	// the next use) after a connection-level failure, because the library
	// never reconnects a NameNode connection that broke in the middle of
	// a call. Writers get a client (and so a lease) of their own.
	mu      sync.Mutex
	clients []*hdfs.Client
	next    int
	idle    []*hdfs.Client // writer clients between writes
	closed  bool

	lists listCache
}

// New opens the backend rooted at the directory URI u. It connects to the
// NameNode at once, so an unreachable NameNode is reported here.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	if u.Scheme != backends.SchemeHDFS {
		return nil, fmt.Errorf("hdfs backend: URI %s is not an hdfs:// URI", u)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt.defaults()
	dir := u.Dir()
	addrs, err := resolveNamenodes(dir.Hosts, opt)
	if err != nil {
		return nil, err
	}
	krb, err := newKerberosAuth(opt.Kerberos, opt.ConfDir)
	if err != nil {
		return nil, err
	}
	if krb != nil {
		// Log in now, so a wrong keytab, an expired cache or an
		// unreachable KDC fails the mount with its own error instead of
		// as a NameNode that cannot be reached.
		if _, err := krb.client(); err != nil {
			return nil, err
		}
	}
	usr := opt.User
	if krb != nil {
		// The NameNode acts for the authenticated principal, whatever
		// name the client claims.
		usr, _, _ = strings.Cut(krb.principal, "@")
	}
	if usr == "" {
		usr = os.Getenv("HADOOP_USER_NAME")
	}
	if usr == "" {
		cur, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("hdfs: no HDFS user configured (--hdfs-user, HADOOP_USER_NAME) and the current user is unknown: %w", err)
		}
		usr = cur.Username
	}
	b := &backend{
		id:      dir.String(),
		dataID:  dataID(ctx, dir, addrs, opt.DialTimeout),
		root:    strings.TrimSuffix(dir.Path, "/"),
		addrs:   addrs,
		user:    usr,
		opt:     opt,
		krb:     krb,
		log:     log.With("backend", dir.String()),
		clients: make([]*hdfs.Client, opt.Connections),
	}
	// Connect one client now, so an unreachable NameNode shows here; the
	// others connect on first use. Each NameNode gets ConnectTimeout to
	// answer (newClient moves on to the next). When every one failed and
	// one of them accepted the connection but stayed silent, New reports
	// at once instead of retrying: another round would only wait on it
	// again.
	attempts := 0
	var nerr *namenodesError
	err = b.retry(ctx, "connect", "", func() error {
		attempts++
		_, err := b.shared()
		if errors.As(err, &nerr) && nerr.silent() {
			return errors.New(err.Error()) // permanent: not retried
		}
		return err
	})
	if err != nil && nerr != nil && nerr.refused() {
		// Reached, and turned away (a secured NameNode refusing SIMPLE
		// authentication): not a transient failure.
		return nil, fmt.Errorf("HDFS namenode %s refused the connection: %s: %w", strings.Join(addrs, ","), nerr.detail(), backends.ErrPermission)
	}
	if err != nil && nerr != nil {
		n := fmt.Sprintf("%d attempts", attempts)
		if attempts == 1 {
			n = "1 attempt"
		}
		return nil, fmt.Errorf("cannot reach HDFS namenode %s (%s): %s: %w", strings.Join(addrs, ","), n, nerr.detail(), backends.ErrTransient)
	}
	if err != nil {
		if krb != nil {
			krb.close()
		}
		return nil, err
	}
	return b, nil
}

// DataID implements backends.DataIdentifier: the cluster by every name it
// was reached by (the URI's hosts, a nameservice among them; the NameNode
// hosts and their addresses), so that write-back staging finds its pending
// files when the channel comes back as the nameservice, one of its
// NameNodes, or a NameNode under another name (see backends.SameStore).
func (b *backend) DataID() string { return b.dataID }

// dataID computes DataID's identity. Names that do not resolve (or not
// within timeout) count by name only.
func dataID(ctx context.Context, dir backends.URI, addrs []string, timeout time.Duration) string {
	names := append([]string(nil), dir.Hosts...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, a := range addrs {
		host := a
		if h, _, err := net.SplitHostPort(a); err == nil {
			host = h
		}
		names = append(names, host)
		if ips, err := net.DefaultResolver.LookupHost(ctx, host); err == nil {
			names = append(names, ips...)
		}
	}
	return backends.HDFSIdentity(names, dir.Path)
}

// resolveNamenodes turns URI hosts into NameNode addresses: Options.Namenodes
// wins; a host without a port is looked up as an HA nameservice or a
// configured NameNode in the Hadoop configuration, else gets DefaultPort.
func resolveNamenodes(hosts []string, opt Options) ([]string, error) {
	if len(opt.Namenodes) > 0 {
		var out []string
		for _, h := range opt.Namenodes {
			for _, a := range strings.Split(h, ",") {
				if a = strings.TrimSpace(a); a != "" {
					out = append(out, withPort(a))
				}
			}
		}
		if len(out) == 0 {
			return nil, errors.New("hdfs: --hdfs-namenodes names no address")
		}
		return out, nil
	}
	var conf hadoopconf.HadoopConf
	var confErr error
	loaded := false
	var out []string
	for _, h := range hosts {
		if _, _, err := net.SplitHostPort(h); err == nil {
			out = append(out, h)
			continue
		}
		if !loaded {
			loaded = true
			if opt.ConfDir != "" {
				conf, confErr = hadoopconf.Load(opt.ConfDir)
			} else {
				conf, confErr = hadoopconf.LoadFromEnvironment()
			}
			if confErr != nil {
				return nil, fmt.Errorf("hdfs: reading the Hadoop configuration to resolve %q: %w", h, confErr)
			}
		}
		if nns := conf["dfs.ha.namenodes."+h]; nns != "" {
			for _, nn := range strings.Split(nns, ",") {
				a := conf["dfs.namenode.rpc-address."+h+"."+strings.TrimSpace(nn)]
				if a == "" {
					return nil, fmt.Errorf("hdfs: nameservice %q: namenode %q has no dfs.namenode.rpc-address.%s.%s", h, nn, h, nn)
				}
				out = append(out, a)
			}
			continue
		}
		if a := conf["dfs.namenode.rpc-address."+h]; a != "" {
			out = append(out, a)
			continue
		}
		out = append(out, net.JoinHostPort(h, DefaultPort))
	}
	return out, nil
}

func withPort(a string) string {
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a
	}
	return net.JoinHostPort(a, DefaultPort)
}

// newClient connects a client to one NameNode: the one that answered
// last, else the next in the list that answers. Each NameNode is tried on
// its own, bounded by DialTimeout to connect and ConnectTimeout for its
// first answer, because the library fails over only when a connection
// cannot be made or a NameNode says it is a standby: a NameNode that
// accepts connections and stays silent would otherwise fail every new
// client, however many NameNodes follow it. A client knows one NameNode
// only; when it turns standby or goes away, the caller's retry replaces
// the client (brokenConn) and this moves on to the next.
func (b *backend) newClient() (*hdfs.Client, error) {
	n := len(b.addrs)
	start := int(b.prefer.Load())
	var tried []namenodeAttempt
	for k := range n {
		i := (start + k) % n
		c, err := b.connect(b.addrs[i])
		if err == nil {
			if k > 0 {
				b.prefer.Store(int32(i))
				b.log.Info("hdfs: using another namenode", "namenode", b.addrs[i], "skipped", (&namenodesError{tried}).detail())
			}
			return c, nil
		}
		tried = append(tried, namenodeAttempt{addr: b.addrs[i], err: err})
	}
	return nil, &namenodesError{tried}
}

// connect connects a client to the NameNode at addr and gets its first
// answer.
func (b *backend) connect(addr string) (*hdfs.Client, error) {
	dial := func(first time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: b.opt.DialTimeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newTimeoutConn(c, addr, b.opt.IOTimeout, first), nil
		}
	}
	co := hdfs.ClientOptions{
		Addresses:           []string{addr},
		User:                b.user,
		UseDatanodeHostname: b.opt.UseDatanodeHostname,
		// A NameNode answers a new connection's first call at once; a
		// DataNode may first have to read from disk.
		NamenodeDialFunc: dial(b.opt.ConnectTimeout),
		DatanodeDialFunc: dial(0),
	}
	if b.krb != nil {
		kc, err := b.krb.client()
		if err != nil {
			return nil, err
		}
		co.KerberosClient = kc
		co.KerberosServicePrincipleName = b.krb.spn
	}
	c, err := hdfs.NewClient(co)
	if err != nil {
		return nil, b.authError(err)
	}
	// The library caches the server defaults on first use without a lock,
	// and every block read consults them: fetch them now, before the
	// client is shared, so concurrent readers only ever read the cache.
	// This is also the NameNode's first answer.
	if _, err := c.ServerDefaults(); err != nil {
		c.Close()
		return nil, b.authError(explain(err)) // a secured NameNode's refusal says why
	}
	return c, nil
}

// authError names the principal and the KDC in a failed authentication
// to the NameNode. The library reports it as text ("SASL handshake: ..."),
// on the connection's first call.
func (b *backend) authError(err error) error {
	if b.krb != nil && strings.Contains(err.Error(), "SASL handshake") {
		return b.krb.describe("authenticating to the NameNode as "+b.krb.spn, err)
	}
	return err
}

// namenodeAttempt is what one NameNode did when a client tried it.
type namenodeAttempt struct {
	addr string
	err  error
}

// namenodesError reports that no NameNode of the list answered, naming
// each and what it did.
type namenodesError struct {
	tried []namenodeAttempt
}

func (e *namenodesError) Error() string {
	addrs := make([]string, len(e.tried))
	for i, t := range e.tried {
		addrs[i] = t.addr
	}
	return fmt.Sprintf("cannot reach HDFS namenode %s: %s", strings.Join(addrs, ","), e.detail())
}

// detail says what each NameNode did: "nn1:8020 accepted the connection
// but did not answer within 10s (connect timeout); nn2:8020: connection
// refused".
func (e *namenodesError) detail() string {
	parts := make([]string, len(e.tried))
	for i, t := range e.tried {
		parts[i] = t.addr + " " + describeNamenodeError(t.err)
	}
	return strings.Join(parts, "; ")
}

// silent reports whether some NameNode accepted the connection and stayed
// silent.
func (e *namenodesError) silent() bool {
	for _, t := range e.tried {
		var s *silentError
		if errors.As(t.err, &s) {
			return true
		}
	}
	return false
}

// refused reports whether every NameNode turned the client away
// (AccessControlException, or a failed SASL authentication).
func (e *namenodesError) refused() bool {
	for _, t := range e.tried {
		if strings.Contains(t.err.Error(), "SASL handshake") {
			continue
		}
		var re hdfs.Error
		if !errors.As(t.err, &re) || !strings.HasSuffix(re.Exception(), "AccessControlException") {
			return false
		}
	}
	return len(e.tried) > 0
}

func (e *namenodesError) Unwrap() []error {
	errs := make([]error, len(e.tried))
	for i, t := range e.tried {
		errs[i] = t.err
	}
	return errs
}

// describeNamenodeError words what one NameNode did, without repeating
// its address where the library already put it in the text.
func describeNamenodeError(err error) string {
	var s *silentError
	if errors.As(err, &s) {
		return s.what()
	}
	msg := strings.TrimPrefix(err.Error(), "no available namenodes: ")
	if strings.Contains(msg, "StandbyException") {
		return "is a standby (StandbyException): " + firstLine(msg)
	}
	return "failed: " + firstLine(msg)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// shared returns the next shared client, connecting it if needed.
func (b *backend) shared() (*hdfs.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	i := b.next % len(b.clients)
	b.next++
	if c := b.clients[i]; c != nil {
		return c, nil
	}
	c, err := b.newClient()
	if err != nil {
		return nil, err
	}
	b.clients[i] = c
	return c, nil
}

// discard drops c from the shared clients after a connection-level failure.
func (b *backend) discard(c *hdfs.Client) {
	b.mu.Lock()
	found := false
	for i, have := range b.clients {
		if have == c {
			b.clients[i], found = nil, true
		}
	}
	b.mu.Unlock()
	if found {
		c.Close()
	}
}

var errClosed = fmt.Errorf("%w: hdfs backend is closed", backends.ErrInvalid)

// do runs fn with the shared client, retrying transient failures.
func (b *backend) do(ctx context.Context, op, key string, fn func(c *hdfs.Client) error) error {
	return b.retry(ctx, op, key, func() error {
		c, err := b.shared()
		if err != nil {
			return err
		}
		err = fn(c)
		if err != nil && brokenConn(err) {
			b.discard(c)
		}
		return err
	})
}

// retry runs fn until it succeeds, fails for good, runs out of attempts or
// ctx ends. The error it returns is mapped to the backends sentinels.
func (b *backend) retry(ctx context.Context, op, key string, fn func() error) error {
	wait := b.opt.RetryBackoff
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return &backends.OpError{Op: op, Key: key, Err: err}
		}
		err := fn()
		if err == nil {
			return nil
		}
		sentinel, transient := classify(err)
		if !transient || attempt >= b.opt.Retries {
			return wrap(op, key, sentinel, transient, err)
		}
		b.log.Debug("hdfs: retrying", "op", op, "key", key, "attempt", attempt, "err", err)
		if err := sleepCtx(ctx, wait); err != nil {
			return &backends.OpError{Op: op, Key: key, Err: err}
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ID names the backend by its canonical URI.
func (b *backend) ID() string { return b.id }

// Close closes the shared client. The staging directory is removed when
// empty, so a finished job leaves no trace of it.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	clients := b.clients
	b.clients = nil
	idle := b.idle
	b.idle = nil
	b.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	removed := false
	var first error
	for _, c := range clients {
		if c == nil {
			continue
		}
		if !removed {
			_ = c.Remove(b.stagingPath()) // fails harmlessly when not empty or missing
			removed = true
		}
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && first == nil {
			first = err
		}
	}
	if b.krb != nil {
		b.krb.close()
	}
	return first
}

// abs maps a key to its HDFS path.
func (b *backend) abs(key string) string {
	key = strings.TrimSuffix(key, "/")
	if key == "" {
		if b.root == "" {
			return "/"
		}
		return b.root
	}
	return b.root + "/" + key
}

func (b *backend) stagingPath() string { return b.root + "/" + stagingDir }

// checkKey refuses keys that would name something other than what they
// read as, or reach outside the root. A segment naming a staging directory
// (this backend's or a nested one's) is reserved: reading operations see
// nothing there, writing ones are refused.
func checkKey(op, key string, writing bool) error {
	if strings.HasPrefix(key, "/") {
		return backends.Wrap(op, key, backends.ErrInvalid, errors.New("key must not start with '/'"))
	}
	trimmed := strings.TrimSuffix(key, "/")
	if trimmed == "" {
		return nil
	}
	for _, seg := range strings.Split(trimmed, "/") {
		switch seg {
		case "":
			return backends.Wrap(op, key, backends.ErrInvalid, errors.New("empty path segment"))
		case ".", "..":
			return backends.Wrap(op, key, backends.ErrInvalid, fmt.Errorf("path segment %q not allowed", seg))
		case stagingDir:
			err := fmt.Errorf("%s is reserved for writes in progress", stagingDir)
			if writing {
				return backends.Wrap(op, key, backends.ErrInvalid, err)
			}
			return backends.Wrap(op, key, backends.ErrNotExist, err)
		}
	}
	return nil
}

// info describes an HDFS file or directory as an ObjectInfo.
func info(key string, fi os.FileInfo) backends.ObjectInfo {
	o := backends.ObjectInfo{
		Key:     strings.TrimSuffix(key, "/"),
		Size:    fi.Size(),
		ModTime: fi.ModTime(),
		IsDir:   fi.IsDir(),
		Mode:    uint32(fi.Mode().Perm()),
	}
	if o.IsDir {
		o.Size = 0
	}
	o.Version = version(fi)
	return o
}

// version is the token of fi: file id, mtime (ms) and size.
func version(fi os.FileInfo) string {
	var id uint64
	if st, ok := fi.Sys().(*hdfs.FileStatus); ok {
		id = st.GetFileId()
	}
	return fmt.Sprintf("%x-%x-%x", id, fi.ModTime().UnixMilli(), fi.Size())
}

// Stat describes one file or directory.
func (b *backend) Stat(ctx context.Context, key string) (backends.ObjectInfo, error) {
	if err := checkKey("stat", key, false); err != nil {
		return backends.ObjectInfo{}, err
	}
	var fi os.FileInfo
	err := b.do(ctx, "stat", key, func(c *hdfs.Client) error {
		var err error
		fi, err = c.Stat(b.abs(key))
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if strings.HasSuffix(key, "/") && !fi.IsDir() {
		return backends.ObjectInfo{}, backends.Wrap("stat", key, backends.ErrNotDir, nil)
	}
	return info(key, fi), nil
}

// Delete removes a file or an empty directory.
func (b *backend) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key, true); err != nil {
		return err
	}
	if strings.TrimSuffix(key, "/") == "" {
		return backends.Wrap("delete", key, backends.ErrInvalid, errors.New("the root cannot be deleted"))
	}
	attempted := false
	return b.do(ctx, "delete", key, func(c *hdfs.Client) error {
		fi, err := c.Stat(b.abs(key))
		if err != nil {
			if attempted && errors.Is(err, os.ErrNotExist) {
				return nil // an earlier attempt deleted it; its answer was lost
			}
			return err
		}
		if strings.HasSuffix(key, "/") && !fi.IsDir() {
			return backends.ErrNotDir
		}
		attempted = true
		return c.Remove(b.abs(key))
	})
}

// MakeDir creates a directory and its parents.
func (b *backend) MakeDir(ctx context.Context, key string) error {
	if err := checkKey("mkdir", key, true); err != nil {
		return err
	}
	return b.do(ctx, "mkdir", key, func(c *hdfs.Client) error {
		return c.MkdirAll(b.abs(key), 0o755)
	})
}

// Rename moves a file or directory; an existing directory at the
// destination is never replaced.
func (b *backend) Rename(ctx context.Context, from, to string) error {
	for _, k := range []string{from, to} {
		if err := checkKey("rename", k, true); err != nil {
			return err
		}
		if strings.TrimSuffix(k, "/") == "" {
			return backends.Wrap("rename", k, backends.ErrInvalid, errors.New("the root cannot be renamed or replaced"))
		}
	}
	attempted := false
	var moved string // version of what is being moved
	return b.do(ctx, "rename", from, func(c *hdfs.Client) error {
		fi, err := c.Stat(b.abs(from))
		if err != nil {
			if attempted && errors.Is(err, os.ErrNotExist) {
				// An earlier attempt may have moved it and lost the answer.
				tfi, terr := c.Stat(b.abs(to))
				if terr == nil && version(tfi) == moved {
					return nil
				}
				if terr != nil && !errors.Is(terr, os.ErrNotExist) {
					return terr // cannot tell yet: try again
				}
			}
			return err
		}
		moved = version(fi)
		if fi, err := c.Stat(b.abs(to)); err == nil && fi.IsDir() {
			return fmt.Errorf("%w: destination %q is a directory", backends.ErrExist, to)
		}
		if err := c.MkdirAll(path.Dir(b.abs(to)), 0o755); err != nil {
			return err
		}
		attempted = true
		return c.Rename(b.abs(from), b.abs(to))
	})
}
