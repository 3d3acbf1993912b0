package node

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestDefaultsAreValid(t *testing.T) {
	s := Defaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Cache.MemoryBytes != 512<<20 || s.Backend.OSS.PartSize != 8<<20 || s.Backend.OSS.Retry.MaxAttempts != 10 ||
		s.Backend.HDFS.Retries != 5 || s.Output.Concurrency != 4 || !s.Output.FsyncDurable || !s.Output.Passthrough {
		t.Errorf("defaults: %+v", s)
	}
}

// TestInvalidValuesRefused: every bad number is an error naming the flag and
// the value, never silently a default (#14 item 10).
func TestInvalidValuesRefused(t *testing.T) {
	for _, c := range []struct{ flag, value string }{
		{"oss-retry-attempts", "-1"},
		{"oss-retry-attempts", "0"},
		{"hdfs-retries", "-1"},
		{"prefetch-requests", "0"},
		{"oss-part-size", "0"},
		{"oss-part-size", "99KiB"},
		{"oss-upload-concurrency", "0"},
		{"oss-staged-upload-concurrency", "0"},
		{"oss-staged-upload-concurrency", "257"},
		{"upload-concurrency", "0"},
		{"upload-retries", "0"},
		{"cache-memory", "lots"},
		{"cache-disk", "-5GiB"},
		{"prefetch-window", "4KiB"},
		{"oss-retry-max-time", "0s"},
		{"fsync-durable", "maybe"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var s Settings
		AddFlags(fs, &s, GroupCache, GroupOSS, GroupHDFS, GroupOutput)
		before := s
		err := fs.Parse([]string{"--" + c.flag + "=" + c.value})
		if err == nil || !strings.Contains(err.Error(), "--"+c.flag) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.value)) {
			t.Errorf("--%s=%s: err %v; want an error naming the flag and the value", c.flag, c.value, err)
		}
		if fmt.Sprint(s) != fmt.Sprint(before) {
			t.Errorf("--%s=%s changed the settings", c.flag, c.value)
		}
		// The same rule holds for a mount request's options.
		if o, _ := lookup(c.flag); o.Scope == ScopeMount {
			if _, err := Defaults().WithMountOptions(map[string]string{c.flag: c.value}); err == nil || !strings.Contains(err.Error(), c.flag) {
				t.Errorf("mount option %s=%s: err %v", c.flag, c.value, err)
			}
		}
	}
}

func TestFlagsSetValues(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var s Settings
	AddFlags(fs, &s, GroupCache, GroupOSS, GroupHDFS, GroupOutput)
	err := fs.Parse([]string{"--cache-memory", "1GiB", "--oss-part-size=16MiB", "--no-passthrough", "--fsync-durable=false",
		"--hdfs-namenodes", "a:1,b:2", "--upload-bwlimit", "10MB"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Cache.MemoryBytes != 1<<30 || s.Backend.OSS.PartSize != 16<<20 || !s.Cache.NoPassthrough || s.Output.FsyncDurable ||
		len(s.Backend.HDFS.Namenodes) != 2 || s.Output.BandwidthLimit != 10_000_000 {
		t.Errorf("settings: %+v", s)
	}
	opts, err := MountFlags(fs)
	if err == nil || !strings.Contains(err.Error(), "--cache-memory") {
		t.Errorf("MountFlags with node-wide flags changed: %v, %v; want an error naming --cache-memory", opts, err)
	}
}

func TestSubcommandGroups(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var s Settings
	AddFlags(fs, &s, GroupOSS)
	if fs.Lookup("oss-part-size") == nil || fs.Lookup("cache-memory") != nil || fs.Lookup("upload-retries") != nil {
		t.Error("AddFlags(GroupOSS) added flags of other groups, or not its own")
	}
}

func TestMountOptionsValidated(t *testing.T) {
	s, err := Defaults().WithMountOptions(map[string]string{"oss-part-size": "32MiB", "upload-retries": "3"})
	if err != nil || s.Backend.OSS.PartSize != 32<<20 || s.Output.Retries != 3 {
		t.Fatalf("%v %+v", err, s)
	}
	if _, err := Defaults().WithMountOptions(map[string]string{"no-such": "1"}); err == nil || !strings.Contains(err.Error(), `"no-such"`) {
		t.Errorf("unknown option: %v", err)
	}
	if _, err := Defaults().WithMountOptions(map[string]string{"cache-memory": "1GiB"}); err == nil || !strings.Contains(err.Error(), "node-wide") {
		t.Errorf("node option in a mount request: %v", err)
	}
}

func TestCredentialsRedacted(t *testing.T) {
	c := Credentials{OSSAccessKeyID: "AKID", OSSAccessKeySecret: "s3cr3t-value", OSSSecurityToken: "t0ken-value", HDFSUser: "bob",
		HDFSPrincipal: "bob@REALM", HDFSKeytab: base64.StdEncoding.EncodeToString([]byte("k3ytab-bytes"))}
	var logged strings.Builder
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	log.Info("x", "credentials", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "credentials", c)
	j, _ := json.Marshal(c)
	jp, _ := json.Marshal(struct{ C *Credentials }{&c})
	for _, out := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v", &c), string(j), string(jp), logged.String()} {
		if strings.Contains(out, "s3cr3t") || strings.Contains(out, "t0ken") || strings.Contains(out, c.HDFSKeytab) || strings.Contains(out, "k3ytab") {
			t.Errorf("secret leaked: %s", out)
		}
		if !strings.Contains(out, "AKID") || !strings.Contains(out, "bob@REALM") {
			t.Errorf("key id or principal missing (they are not secret and help debugging): %s", out)
		}
	}
}

// TestS3Options: the S3 flags land in the s3 backend's options; a bad
// path style or a part below S3's 5 MiB minimum is refused, naming the
// flag; the endpoint may be set per mount, the credentials file only per
// node.
func TestS3Options(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var s Settings
	AddFlags(fs, &s, GroupS3)
	if fs.Lookup("s3-endpoint") == nil || fs.Lookup("oss-endpoint") != nil {
		t.Fatal("AddFlags(GroupS3) added flags of other groups, or not its own")
	}
	err := fs.Parse([]string{"--s3-endpoint", "http://minio:9000", "--s3-region", "eu-west-1", "--s3-path-style", "false",
		"--s3-credentials-file", "/etc/mlfsd/s3", "--s3-part-size", "16MiB"})
	if err != nil {
		t.Fatal(err)
	}
	o := s.Backend.S3
	if o.Endpoint != "http://minio:9000" || o.Region != "eu-west-1" || o.PathStyle != "false" || o.CredentialsFile != "/etc/mlfsd/s3" || o.PartSize != 16<<20 {
		t.Errorf("S3 options: %+v", o)
	}
	for _, bad := range [][]string{{"--s3-path-style", "yes"}, {"--s3-part-size", "1MiB"}} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var s Settings
		AddFlags(fs, &s, GroupS3)
		if err := fs.Parse(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v; want an error naming the flag", bad, err)
		}
	}
	if s, err := Defaults().WithMountOptions(map[string]string{"s3-endpoint": "http://10.0.0.5:8333"}); err != nil || s.Backend.S3.Endpoint != "http://10.0.0.5:8333" {
		t.Errorf("s3-endpoint as a mount option: %v %+v", err, s.Backend.S3)
	}
	if _, err := Defaults().WithMountOptions(map[string]string{"s3-credentials-file": "/tmp/x"}); err == nil {
		t.Error("a mount request set the node's S3 credentials file")
	}
}
