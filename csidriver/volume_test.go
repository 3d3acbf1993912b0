package csidriver

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/node"
)

func TestParseAttributes(t *testing.T) {
	s, err := parseAttributes(map[string]string{
		"uri": "oss://bkt/data/", "mode": "output", "upload-concurrency": "8",
		"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/ephemeral": "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !s.output || s.uri.String() != "oss://bkt/data/" || len(s.options) != 1 || s.options["upload-concurrency"] != "8" {
		t.Fatalf("parsed %+v", s)
	}
	s, err = parseAttributes(map[string]string{"uri": "oss://bkt/data/", AttrSharedCache: "oss://cache.oss-cn-hangzhou-internal.aliyuncs.com/mlfsd/", AttrSharedCacheSize: "2TiB"})
	if err != nil || s.options[AttrSharedCache] != "oss://cache.oss-cn-hangzhou-internal.aliyuncs.com/mlfsd/" || s.options[AttrSharedCacheSize] != "2TiB" {
		t.Fatalf("shared cache attributes: %+v, %v", s, err)
	}
	if s, err := parseAttributes(map[string]string{"uri": "oss://bkt/data/", "input-no-open": "false"}); err != nil || s.options["input-no-open"] != "false" {
		t.Fatalf("input-no-open attribute: %+v, %v", s, err)
	}
	if s, err := parseAttributes(map[string]string{"uri": "nas:///data/x.bin"}); err != nil || s.output {
		t.Fatalf("input by default: %+v, %v", s, err)
	}

	for _, c := range []struct {
		attrs map[string]string
		want  string // the key the error must name
	}{
		{map[string]string{}, `"uri"`},
		{map[string]string{"uri": "gs://bkt/x/"}, `"uri"`},
		{map[string]string{"uri": "oss://bkt/x/", "mode": "rw"}, `"mode"`},
		{map[string]string{"uri": "oss://bkt/x.bin", "mode": "output"}, `"uri"`},
		{map[string]string{"uri": "oss://bkt/x/", "upload-concurrency": "0"}, `"upload-concurrency"`},
		{map[string]string{"uri": "oss://bkt/x/", "oss-part-size": "lots"}, `"oss-part-size"`},
		{map[string]string{"uri": "oss://bkt/x/", "cache-memory": "1GiB"}, `"cache-memory"`},
		{map[string]string{"uri": "oss://bkt/x/", "cahce-dir": "/x"}, `"cahce-dir"`},
		{map[string]string{"uri": "oss://bkt/x/", AttrSharedCache: "oss://cache/one-object"}, `"shared-cache"`},
		{map[string]string{"uri": "oss://bkt/x/", AttrSharedCache: "gs://cache/x/"}, `"shared-cache"`},
		{map[string]string{"uri": "oss://bkt/x/", AttrSharedCacheSize: "big"}, `"shared-cache-size"`},
		{map[string]string{"uri": "oss://bkt/x/", "input-no-open": "sometimes"}, `"input-no-open"`},
	} {
		_, err := parseAttributes(c.attrs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.attrs, err, c.want)
		}
	}
}

func TestCredentials(t *testing.T) {
	c, err := credentials(map[string]string{SecretOSSAccessKeyID: "id", SecretOSSAccessKeySecret: "sec", SecretOSSSecurityToken: "tok", SecretHDFSUser: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if c != (node.Credentials{OSSAccessKeyID: "id", OSSAccessKeySecret: "sec", OSSSecurityToken: "tok", HDFSUser: "alice"}) {
		t.Fatalf("credentials %#v", c)
	}
	_, err = credentials(map[string]string{"ossAccessKeySecret": "hunter2"})
	if err == nil || !strings.Contains(err.Error(), "ossAccessKeySecret") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("unknown secret key: %v (must name the key, never the value)", err)
	}
	if _, err := credentials(map[string]string{SecretOSSAccessKeySecret: "x"}); err == nil {
		t.Error("a secret without its key ID was accepted")
	}
	c, err = credentials(map[string]string{SecretS3AccessKeyID: "AKIA", SecretS3SecretAccessKey: "sec", SecretS3SessionToken: "tok"})
	if err != nil || c != (node.Credentials{S3AccessKeyID: "AKIA", S3SecretAccessKey: "sec", S3SessionToken: "tok"}) {
		t.Errorf("S3 secrets: %v, %v", c, err)
	}
	// A keytab is binary; it travels base64-encoded from here on.
	kt := "\x05\x02\x00\x00\xffkeys"
	c, err = credentials(map[string]string{"hdfs-principal": "alice@REALM", "hdfs-keytab": kt})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := base64.StdEncoding.DecodeString(c.HDFSKeytab); string(got) != kt || c.HDFSPrincipal != "alice@REALM" {
		t.Errorf("kerberos credentials %q %q", c.HDFSPrincipal, got)
	}
	if _, err := credentials(map[string]string{"hdfs-keytab": kt}); err == nil || !strings.Contains(err.Error(), "hdfs-principal") || strings.Contains(err.Error(), "keys") {
		t.Errorf("a keytab without its principal: %v", err)
	}
}

// TestPodIdentity: the pod's token for the role's audience is taken from
// the volume context; a malformed tokens value, a missing audience, or
// keys and a role for one store are errors that show no token.
func TestPodIdentity(t *testing.T) {
	const tok = "eyJ-pod-t0ken"
	spec, err := parseAttributes(map[string]string{AttrURI: "s3://bkt/p/", AttrS3RoleARN: "arn:aws:iam::1:role/r",
		AttrOSSRoleARN: "acs:ram::1:role/r", AttrOSSOIDCProviderARN: "acs:ram::1:oidc-provider/p"})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := podTokens(map[string]string{TokensKey: `{"sts.amazonaws.com":{"token":"` + tok + `","expirationTimestamp":"2030-01-01T00:00:00Z"},"sts.aliyuncs.com":{"token":"` + tok + `2"}}`})
	if err != nil {
		t.Fatal(err)
	}
	c, err := withPodIdentity(node.Credentials{}, spec, tokens, DefaultOSSAudience, DefaultS3Audience)
	if err != nil || c.S3WebIdentityToken != tok || c.OSSOIDCToken != tok+"2" || c.S3RoleARN == "" || c.OSSOIDCProviderARN == "" {
		t.Errorf("pod identity: %v, %v", c, err)
	}
	if _, err := podTokens(map[string]string{TokensKey: `{"sts.amazonaws.com":"` + tok}); err == nil || strings.Contains(err.Error(), tok) {
		t.Errorf("malformed tokens: %v", err)
	}
	delete(tokens, DefaultOSSAudience)
	if _, err := withPodIdentity(node.Credentials{}, spec, tokens, DefaultOSSAudience, DefaultS3Audience); err == nil || !strings.Contains(err.Error(), DefaultOSSAudience) {
		t.Errorf("missing audience: %v", err)
	}
	if _, err := withPodIdentity(node.Credentials{S3AccessKeyID: "AKIA", S3SecretAccessKey: "s"}, spec, map[string]string{DefaultS3Audience: tok, DefaultOSSAudience: tok},
		DefaultOSSAudience, DefaultS3Audience); err == nil || !strings.Contains(err.Error(), AttrS3RoleARN) {
		t.Errorf("S3 keys and an S3 role: %v", err)
	}
	if _, err := parseAttributes(map[string]string{AttrURI: "oss://bkt/p/", AttrOSSRoleARN: "acs:ram::1:role/r"}); err == nil || !strings.Contains(err.Error(), AttrOSSOIDCProviderARN) {
		t.Errorf("an OSS role without its provider: %v", err)
	}
}

func TestVolumeID(t *testing.T) {
	u, err := backends.ParseURI("oss://bkt/base/pvc-1/")
	if err != nil {
		t.Fatal(err)
	}
	key, other := []byte("controller-key-0123456789"), []byte("another-key-0123456789")
	for _, p := range []string{policyRetain, policyDelete} {
		got, ok := parseVolumeID(volumeID(key, p, u))
		if !ok || got.policy != p || got.uri.String() != u.String() || !got.signedBy(key) || got.signedBy(other) || got.signedBy(nil) {
			t.Errorf("%s: parsed back %+v %v", p, got, ok)
		}
		got, ok = parseVolumeID(volumeID(nil, p, u))
		if !ok || got.policy != p || got.uri.String() != u.String() || got.signedBy(key) {
			t.Errorf("%s unsigned: parsed back %+v %v", p, got, ok)
		}
	}
	// An ID with its URI changed keeps no valid MAC.
	signed := volumeID(key, policyDelete, u)
	forged := strings.Replace(signed, "pvc-1", "pvc-2", 1)
	if p, ok := parseVolumeID(forged); !ok || p.signedBy(key) {
		t.Errorf("forged %q: %+v %v, want parsed and not signed", forged, p, ok)
	}
	for _, id := range []string{"imagenet-train", "fake-vol-id-123", "mlfsd:retain:oss://bkt/x.bin", "mlfsd:keep:oss://bkt/x/", "delete:oss://bkt/x/"} {
		if _, ok := parseVolumeID(id); ok {
			t.Errorf("%q parsed as a provisioned volume", id)
		}
	}
}

// TestCallLogRedactsSecrets runs a publish with secrets through the
// logging interceptor at debug level and checks that no secret value
// reaches the log, while the request is still logged.
func TestCallLogRedactsSecrets(t *testing.T) {
	var buf bytes.Buffer
	root := t.TempDir()
	d, err := New(Options{NodeID: "n", Mounter: refuse{}, KubeletRoot: root, Log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ns := &nodeServer{d: d}
	req := &csi.NodePublishVolumeRequest{
		VolumeId: "v", TargetPath: root + "/target",
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}},
		VolumeContext: map[string]string{"uri": "oss://bkt/x/", "mode": "output"},
		Secrets:       map[string]string{SecretOSSAccessKeyID: "AKID-visible", SecretOSSAccessKeySecret: "s3cr3t-value", SecretOSSSecurityToken: "sts-t0ken"},
	}
	_, err = d.logCalls(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodePublishVolume"},
		func(ctx context.Context, r any) (any, error) {
			return ns.NodePublishVolume(ctx, r.(*csi.NodePublishVolumeRequest))
		})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("publish through a refusing mounter: %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "NodePublishVolume") || !strings.Contains(out, "oss://bkt/x/") {
		t.Fatalf("the call was not logged:\n%s", out)
	}
	for _, secret := range []string{"s3cr3t-value", "sts-t0ken"} {
		if strings.Contains(out, secret) || strings.Contains(err.Error(), secret) {
			t.Errorf("%q reached the log or the error:\n%s\n%v", secret, out, err)
		}
	}
}

// refuse is a Mounter that refuses every mount.
type refuse struct{}

func (refuse) Mount(_ context.Context, req node.MountRequest) (node.MountInfo, error) {
	return node.MountInfo{}, &refusedError{req.Credentials}
}

func (refuse) Unmount(context.Context, string) error { return node.ErrNotMounted }

type refusedError struct{ c node.Credentials }

// Error formats the credentials the way a careless error might.
func (e *refusedError) Error() string { return "refused with " + e.c.String() }
