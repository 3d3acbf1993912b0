package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// TestSharedCacheOnS3: the shared tier and the input channel both on
// s3:// — the tier on the S3 face of an `mlfsd emulate oss` subprocess
// (standing for an in-cluster MinIO), the dataset on the S3 face of a
// source emulator that takes another key: the daemons reach each store
// with its own key, the tier's named by profile= in its URI, both from one
// --s3-credentials-file. Node 1 reads the dataset cold through a real FUSE
// mount and fills the tier; node 2, with its own empty cache, reads it for
// at most 5% of the dataset in source bytes, every byte right.
//
// With MLFSD_TEST_S3_ENDPOINT set (and that store's key in AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY), the tier is a prefix of bucket mlfsd-test on
// that store instead (a MinIO, say), created if missing.
func TestSharedCacheOnS3(t *testing.T) {
	external := os.Getenv("MLFSD_TEST_S3_ENDPOINT")
	tierKey, tierSecret := ossemutest.AccessKeyID, ossemutest.AccessKeySecret
	if external != "" {
		tierKey, tierSecret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		createTestBucket(t, external, "mlfsd-test", tierKey, tierSecret)
	}
	srcRoot, tierRoot := t.TempDir(), t.TempDir()
	data := filepath.Join(srcRoot, "bkt", "data")
	os.MkdirAll(filepath.Join(data, "imgs"), 0o755)
	os.Mkdir(filepath.Join(tierRoot, "tier"), 0o755)
	files := map[string][]byte{
		"shard-0.bin": randomBytes(t, 12<<20+7),
		"shard-1.bin": randomBytes(t, 2<<20+100),
	}
	for i := range 12 {
		files[fmt.Sprintf("imgs/%03d.jpg", i)] = randomBytes(t, 40<<10+i*1000)
	}
	var total int64
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(data, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += int64(len(b))
	}
	const srcKey, srcSecret = "AKSOURCE", "source-secret-0123456789"
	_, endpoint := ossemutest.Start(t, srcRoot, ossemu.Options{TTFB: 2 * time.Millisecond, AccessKeyID: srcKey, AccessKeySecret: srcSecret})
	// One credentials file: the default profile reaches the source, the
	// [tier] profile the tier. Nothing in the environment.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		t.Setenv(k, "")
	}
	credFile := filepath.Join(t.TempDir(), "s3-credentials")
	cred := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n[tier]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		srcKey, srcSecret, tierKey, tierSecret)
	if err := os.WriteFile(credFile, []byte(cred), 0o600); err != nil {
		t.Fatal(err)
	}
	tierURI := ""
	var tierID string // its metrics' label: the backend's ID (bucket, prefix, endpoint host)
	if external == "" {
		tier := startSharedEmulator(t, tierRoot)
		tierURI = "s3://tier/mlfsd/?endpoint=http://" + tier.addr + "&profile=tier"
		tierID = backends.URI{Scheme: backends.SchemeS3, Bucket: "tier", Path: "/mlfsd/", Endpoint: tier.addr}.String()
	} else {
		prefix := fmt.Sprintf("/sharedcache-%d/", time.Now().UnixNano())
		host := strings.ToLower(strings.TrimSuffix(external[strings.Index(external, "://")+3:], "/"))
		tierURI = "s3://mlfsd-test" + prefix + "?endpoint=" + external + "&profile=tier"
		tierID = backends.URI{Scheme: backends.SchemeS3, Bucket: "mlfsd-test", Path: prefix, Endpoint: host}.String()
	}
	srcURI := "s3://bkt/data/?endpoint=" + endpoint

	key := tierKeyFile(t) // one for every node: the cluster's
	startNode := func() (*nodeDaemon, string) {
		d := startNodeDaemon(t, t.TempDir(), "--s3-credentials-file", credFile, "--shared-cache", tierURI, "--shared-cache-timeout", "2s",
			"--shared-cache-key-file", key)
		mnt := t.TempDir()
		if code, _, errOut := d.client(t, "mount", "--daemon", d.socket, "--read-only", srcURI, mnt); code != 0 {
			t.Fatalf("mount %s: %s\ndaemon:\n%s", srcURI, errOut, d.stderr)
		}
		return d, mnt
	}
	readAll := func(mnt string) {
		t.Helper()
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s through %s: %d bytes (want %d), %v", name, mnt, len(got), len(want), err)
			}
		}
	}
	metric := func(d *nodeDaemon, name string) float64 {
		t.Helper()
		v, ok := metricValue(t, d.scrape(t), name, map[string]string{"store": tierID})
		if !ok {
			t.Fatalf("no %s{store=%q} in the scrape of a node with a shared cache", name, tierID)
		}
		return v
	}

	n1, m1 := startNode()
	readAll(m1)
	first := sourceBytesOut(t, endpoint)
	if first < total {
		t.Fatalf("node 1 read a %d-byte dataset cold; the source sent %d", total, first)
	}
	if err := testwait.Until(testwait.Guard, func() bool { return metric(n1, sharedcache.MetricWriteBytes) >= float64(total) }); err != nil {
		t.Fatalf("node 1 wrote %v of %d bytes to the shared tier (dropped %v, errors %v)", metric(n1, sharedcache.MetricWriteBytes), total,
			metric(n1, sharedcache.MetricDropped), metric(n1, sharedcache.MetricWriteErrors))
	}
	// The blocks are objects in the tier's bucket, under its prefix.
	var objects int
	filepath.WalkDir(filepath.Join(tierRoot, "tier", "mlfsd"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			objects++
		}
		return nil
	})
	if objects == 0 && external == "" {
		t.Errorf("the shared tier holds no objects under tier/mlfsd/")
	}

	n2, m2 := startNode()
	readAll(m2)
	second := sourceBytesOut(t, endpoint) - first
	t.Logf("dataset %d bytes: node 1 cost the source %d, node 2 %d; %d objects in the tier", total, first, second, objects)
	if float64(second) > 0.05*float64(total) {
		t.Errorf("node 2 cost the source %d bytes of a %d-byte dataset that node 1 had read; want at most 5%%", second, total)
	}
	if hits := metric(n2, sharedcache.MetricHitBytes); hits < 0.95*float64(total) {
		t.Errorf("node 2 read %v bytes from the shared tier; want most of the %d-byte dataset", hits, total)
	}
	for _, d := range []*nodeDaemon{n1, n2} {
		d.stop(t)
	}
	for _, d := range []*nodeDaemon{n1, n2} {
		if log := d.stderr.String(); strings.Contains(log, tierSecret) || strings.Contains(log, srcSecret) {
			t.Error("a daemon logged an S3 secret key")
		}
	}
}

// createTestBucket creates bucket at the S3 store ep unless it exists.
func createTestBucket(t *testing.T, ep, bucket, key, secret string) {
	t.Helper()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(ep), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")})
	_, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var ae smithy.APIError
	if err != nil && !(errors.As(err, &ae) && (ae.ErrorCode() == "BucketAlreadyOwnedByYou" || ae.ErrorCode() == "BucketAlreadyExists")) {
		t.Fatalf("create bucket %s at %s: %v", bucket, ep, err)
	}
}
