package csidriver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/node"
)

// podJWT is a service-account token as kubelet hands it over (the
// emulator's STS checks its expiry, not its signature); n tells tokens
// apart.
func podJWT(aud string, n int) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:team:trainer",
		"aud": aud, "exp": time.Now().Add(time.Hour).Unix(), "jti": n})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + enc([]byte("sig"))
}

// tokensContext is what kubelet puts under TokensKey.
func tokensContext(tokens map[string]string) string {
	m := map[string]map[string]string{}
	for aud, tok := range tokens {
		m[aud] = map[string]string{"token": tok, "expirationTimestamp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// syncBuffer is a log sink shared by the driver and the node.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPlugin serves a driver over an in-process node on a unix socket
// and returns its Node client; everything both log goes to logs.
func startPlugin(t *testing.T, set node.Settings, logs *syncBuffer) csi.NodeClient {
	t.Helper()
	c, _ := startPluginOn(t, node.Options{Settings: set}, logs)
	return c
}

// startPluginOn is startPlugin with the node's options (a state dir) and
// the node returned; the node is closed when the test ends.
func startPluginOn(t *testing.T, opt node.Options, logs *syncBuffer) (csi.NodeClient, *node.Node) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opt.Log = log
	n, err := node.New(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	// Targets are the tests' temporary directories: the kubelet root is
	// where those are made.
	d, err := New(Options{NodeID: "n1", Mounter: n, Settings: opt.Settings, Log: log, DrainTimeout: time.Minute, KubeletRoot: os.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, l) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("node Close: %v", err)
		}
	})
	return csi.NewNodeClient(conn), n
}

func publishRequest(target string, output bool, attrs map[string]string) *csi.NodePublishVolumeRequest {
	mode := csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	if output {
		mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		attrs[AttrMode] = ModeOutput
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId: "vol-" + filepath.Base(target), TargetPath: target, VolumeContext: attrs,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}},
	}
}

// catFile reads path in another process (reading our own in-process FUSE
// mount from this one can deadlock the runtime).
func catFile(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("cat", path).CombinedOutput()
	if err != nil {
		t.Fatalf("cat %s: %v: %s", path, err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `cat > "$1"`, "sh", path)
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write %s: %v: %s", path, err, out)
	}
}

// noNodeIdentity empties the node's own credentials, so that a mount that
// works can only have used the pod's.
func noNodeIdentity(t *testing.T) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_SHARED_CREDENTIALS_FILE", "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
}

func testSettings(t *testing.T) node.Settings {
	s := node.Defaults()
	s.Cache.Dir = ""
	s.Cache.MemoryBytes = 32 << 20
	s.Output.StagingDir = t.TempDir()
	return s
}

// TestPublishWithPodTokenS3: a volume naming an IAM role is published with
// the pod's service-account token alone (the node has no keys of its
// own): the plugin has it exchanged by AssumeRoleWithWebIdentity at the
// STS, reads and writes through the mount with the keys it got, keeps
// them fresh across their expiry, and a republish with a new token
// assumes the role again on the live mount. No token reaches a log.
func TestPublishWithPodTokenS3(t *testing.T) {
	noNodeIdentity(t)
	const role = "arn:aws:iam::123456789012:role/trainer"
	const keyLife = 3 * time.Second
	srv, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{STSDuration: keyLife, STSRoles: []string{role}})
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	for _, f := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(root, "bkt", "data", f), []byte("file "+f), 0o644)
	}
	set := testSettings(t)
	set.Identity.S3STSEndpoint = ep
	var logs syncBuffer
	c := startPlugin(t, set, &logs)
	ctx := t.Context()

	tok1 := podJWT(DefaultS3Audience, 1)
	attrs := func(uri, tok string) map[string]string {
		return map[string]string{AttrURI: uri, "s3-endpoint": ep, AttrS3RoleARN: role,
			TokensKey: tokensContext(map[string]string{DefaultS3Audience: tok, DefaultOSSAudience: podJWT(DefaultOSSAudience, 0)})}
	}
	in := filepath.Join(t.TempDir(), "pods", "p1", "in")
	if _, err := c.NodePublishVolume(ctx, publishRequest(in, false, attrs("s3://bkt/data/", tok1))); err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, filepath.Join(in, "a")); got != "file a" {
		t.Errorf("read through the pod's mount: %q", got)
	}
	if st := srv.Stats(); st["sts.issued"] != 1 {
		t.Errorf("STS issued %d keys at publish, want 1 (stats %v)", st["sts.issued"], st)
	}
	out := filepath.Join(t.TempDir(), "pods", "p1", "out")
	if _, err := c.NodePublishVolume(ctx, publishRequest(out, true, attrs("s3://bkt/out/", tok1))); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(out, "before"), "written before the keys expired")

	// Republish (kubelet, requiresRepublish) with a fresh token: the role
	// is assumed again with it, on the live mount.
	issued := srv.Stats()["sts.issued"]
	tok2 := podJWT(DefaultS3Audience, 2)
	if _, err := c.NodePublishVolume(ctx, publishRequest(in, false, attrs("s3://bkt/data/", tok2))); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if got := srv.Stats()["sts.issued"]; got != issued+1 {
		t.Errorf("republish with a new token: STS issued %d keys, want %d", got, issued+1)
	}
	// The same token again (kubelet's usual republish): nothing to do.
	if _, err := c.NodePublishVolume(ctx, publishRequest(in, false, attrs("s3://bkt/data/", tok2))); err != nil {
		t.Fatalf("republish: %v", err)
	}

	// Past the expiry of every key issued so far: the mounts refreshed
	// theirs before it, and the store refused nothing.
	time.Sleep(keyLife + time.Second) // the keys' clock is the wall clock: their expiry is the behaviour under test
	if got := catFile(t, filepath.Join(in, "b")); got != "file b" {
		t.Errorf("read after the first keys expired: %q", got)
	}
	writeFile(t, filepath.Join(out, "after"), "written after")
	if got := srv.Stats()["sts.issued"]; got <= issued+1 {
		t.Errorf("no key issued after the first ones expired (%d in all)", got)
	}
	for _, target := range []string{in, out} {
		if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
			t.Fatalf("unpublish %s: %v", target, err)
		}
	}
	for f, want := range map[string]string{"before": "written before the keys expired", "after": "written after"} {
		if got, err := os.ReadFile(filepath.Join(root, "bkt", "out", f)); err != nil || string(got) != want {
			t.Errorf("out/%s in the store: %q, %v", f, got, err)
		}
	}
	if st := srv.Stats(); st["sts.expired"] != 0 {
		t.Errorf("the store refused %d requests signed with expired keys (stats %v)", st["sts.expired"], st)
	}

	// A role volume without the pod's token: a clear error saying what the
	// CSIDriver object lacks.
	a := attrs("s3://bkt/data/", tok1)
	delete(a, TokensKey)
	_, err := c.NodePublishVolume(ctx, publishRequest(filepath.Join(t.TempDir(), "x"), false, a))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tokenRequests") || !strings.Contains(err.Error(), DefaultS3Audience) {
		t.Errorf("no token: %v", err)
	}
	// A role the STS refuses: named, the token not.
	a = attrs("s3://bkt/data/", tok1)
	a[AttrS3RoleARN] = "arn:aws:iam::123456789012:role/other"
	_, err = c.NodePublishVolume(ctx, publishRequest(filepath.Join(t.TempDir(), "y"), false, a))
	if err == nil || !strings.Contains(err.Error(), "role/other") || !strings.Contains(err.Error(), "AssumeRoleWithWebIdentity") || strings.Contains(err.Error(), tok1) {
		t.Errorf("wrong role: %v", err)
	}
	for _, tok := range []string{tok1, tok2} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("a pod's token reached the log:\n%s", logs.String())
		}
	}
}

// TestPublishWithPodTokenOSS: the same for OSS RRSA: the pod's token is
// exchanged by credentials-go's OIDC provider (AssumeRoleWithOIDC at
// sts.aliyuncs.com, over HTTPS: reached here through the emulator's
// proxy, under its authority), a republish with a new token assumes the
// role again, and reads go on across the keys' expiry.
func TestPublishWithPodTokenOSS(t *testing.T) {
	noNodeIdentity(t)
	const role = "acs:ram::1234:role/trainer"
	const provider = "acs:ram::1234:oidc-provider/ack-cluster"
	const keyLife = 2 * time.Second
	srv, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{STSDuration: keyLife, STSRoles: []string{role}})
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	os.WriteFile(filepath.Join(root, "bkt", "data", "a"), []byte("file a"), 0o644)
	os.WriteFile(filepath.Join(root, "bkt", "data", "b"), []byte("file b"), 0o644)
	proxy := ossemutest.StartMetadata(t, srv, ossemu.MetadataOptions{})
	trustEmulatorSTS(t, srv, proxy)

	set := testSettings(t)
	var logs syncBuffer
	c := startPlugin(t, set, &logs)
	ctx := t.Context()
	tok1 := podJWT(DefaultOSSAudience, 1)
	attrs := func(tok string) map[string]string {
		return map[string]string{AttrURI: "oss://bkt/data/", "oss-endpoint": ep, AttrOSSRoleARN: role, AttrOSSOIDCProviderARN: provider,
			TokensKey: tokensContext(map[string]string{DefaultOSSAudience: tok})}
	}
	in := filepath.Join(t.TempDir(), "pods", "p1", "in")
	if _, err := c.NodePublishVolume(ctx, publishRequest(in, false, attrs(tok1))); err != nil {
		t.Fatal(err)
	}
	if got := catFile(t, filepath.Join(in, "a")); got != "file a" {
		t.Errorf("read through the pod's mount: %q", got)
	}
	issued := srv.Stats()["sts.issued"]
	if issued == 0 || srv.Stats()["metadata.connect"] == 0 {
		t.Fatalf("no key issued by STS through the proxy (stats %v)", srv.Stats())
	}
	tok2 := podJWT(DefaultOSSAudience, 2)
	if _, err := c.NodePublishVolume(ctx, publishRequest(in, false, attrs(tok2))); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if got := srv.Stats()["sts.issued"]; got <= issued {
		t.Errorf("republish with a new token: STS issued %d keys in all, want more than %d", got, issued)
	}
	// Past the expiry of the keys issued so far: renewed before it, and
	// the store refused nothing.
	time.Sleep(keyLife + time.Second) // the keys' clock is the wall clock: their expiry is the behaviour under test
	before := srv.Stats()["sts.issued"]
	if got := catFile(t, filepath.Join(in, "b")); got != "file b" {
		t.Errorf("read after the first keys expired: %q", got)
	}
	if srv.Stats()["sts.issued"] <= before {
		t.Errorf("the read after the expiry was not signed with renewed keys (stats %v)", srv.Stats())
	}
	if st := srv.Stats(); st["sts.expired"] != 0 {
		t.Errorf("the store refused %d requests signed with expired keys (stats %v)", st["sts.expired"], st)
	}
	// Another volume with the provider attribute alone is refused.
	a := attrs(tok1)
	delete(a, AttrOSSRoleARN)
	if _, err := c.NodePublishVolume(ctx, publishRequest(filepath.Join(t.TempDir(), "x"), false, a)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("provider without role: %v", err)
	}
	if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: in}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{tok1, tok2} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("a pod's token reached the log:\n%s", logs.String())
		}
	}
}

// trustEmulatorSTS has this process reach sts.aliyuncs.com (whose https://
// credentials-go fixes) through the emulator's proxy, under its authority,
// until the test ends. credentials-go clones http.DefaultTransport for
// each call: that is where a test can point it.
func trustEmulatorSTS(t *testing.T, srv *ossemu.Server, proxy string) {
	t.Helper()
	pem, err := srv.CACertPEM()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the emulator's CA certificate does not parse")
	}
	pu, err := url.Parse(proxy)
	if err != nil {
		t.Fatal(err)
	}
	dt := http.DefaultTransport.(*http.Transport)
	oldProxy, oldTLS := dt.Proxy, dt.TLSClientConfig
	dt.Proxy = func(r *http.Request) (*url.URL, error) {
		if h, _, err := net.SplitHostPort(r.URL.Host); (err == nil && h == "sts.aliyuncs.com") || r.URL.Host == "sts.aliyuncs.com" {
			return pu, nil
		}
		return oldProxy(r)
	}
	dt.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(func() { dt.Proxy, dt.TLSClientConfig = oldProxy, oldTLS })
}

// TestRestoredVolumeWaitsForRepublish: after a crash, a node started on
// the mount table does not mount a pod's volume on its own identity (it
// has none here, and would not use it): the volume waits, said so in
// Status, until kubelet's republish brings the pod's token, and is then
// mounted with the keys that token is exchanged for.
func TestRestoredVolumeWaitsForRepublish(t *testing.T) {
	noNodeIdentity(t)
	const role = "arn:aws:iam::123456789012:role/trainer"
	srv, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{STSDuration: time.Hour, STSRoles: []string{role}})
	os.MkdirAll(filepath.Join(root, "bkt", "data"), 0o755)
	os.WriteFile(filepath.Join(root, "bkt", "data", "a"), []byte("file a"), 0o644)
	set := testSettings(t)
	set.Identity.S3STSEndpoint = ep
	stateDir := t.TempDir()
	var logs syncBuffer
	ctx := t.Context()
	tok := podJWT(DefaultS3Audience, 1)
	target := filepath.Join(t.TempDir(), "pods", "p1", "in")
	req := publishRequest(target, false, map[string]string{AttrURI: "s3://bkt/data/", "s3-endpoint": ep, AttrS3RoleARN: role,
		TokensKey: tokensContext(map[string]string{DefaultS3Audience: tok})})

	c1, _ := startPluginOn(t, node.Options{Settings: set, StateDir: stateDir}, &logs)
	if _, err := c1.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	table, err := os.ReadFile(filepath.Join(stateDir, "mounts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(table), tok) || strings.Contains(string(table), role) {
		t.Errorf("the mount table holds the pod's identity:\n%s", table)
	}
	// The crash: the node's table still lists the volume.
	if _, err := c1.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "mounts.json"), table, 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(target, 0o750)

	c2, n2 := startPluginOn(t, node.Options{Settings: set, StateDir: stateDir}, &logs)
	restored, err := n2.Restore(ctx)
	if err != nil || len(restored) != 0 {
		t.Fatalf("Restore: %v, %v (want nothing mounted)", restored, err)
	}
	st := n2.Status()
	if len(st) != 1 || st[0].Target != target || st[0].State != node.StateWaitingCredentials {
		t.Fatalf("status after the restart: %+v", st)
	}
	if _, mounted, err := mountinfo.Lookup(target); err != nil || mounted {
		t.Fatalf("the volume is mounted before its pod's republish (%v, %v)", mounted, err)
	}
	issued := srv.Stats()["sts.issued"]
	if _, err := c2.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if got := catFile(t, filepath.Join(target, "a")); got != "file a" {
		t.Errorf("read after the republish: %q", got)
	}
	if srv.Stats()["sts.issued"] != issued+1 {
		t.Errorf("the republished volume did not assume the pod's role (stats %v)", srv.Stats())
	}
	if st := n2.Status(); len(st) != 1 || st[0].State != node.StateMounted {
		t.Errorf("status after the republish: %+v", st)
	}
	if _, err := c2.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), tok) {
		t.Errorf("the pod's token reached the log")
	}
}
