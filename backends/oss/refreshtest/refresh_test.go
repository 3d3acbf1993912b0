package refreshtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/aliyun/credentials-go/credentials/providers"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/backends/s3"
)

const (
	testBucket = "bkt"
	// keyLifetime is the lifetime of the keys the emulator issues.
	keyLifetime = 60 * time.Second
)

// emu is the emulator the job reaches, also at credentials-go's fixed
// https://sts.aliyuncs.com (ossemutest.RunAsProxy).
var emu ossemutest.Process

func TestMain(m *testing.M) {
	os.Exit(ossemutest.RunAsProxy(m, testBucket, ossemu.Options{STSDuration: keyLifetime,
		STSRoles: []string{"acs:ram::1:role/reader", "arn:aws:iam::1:role/reader"}}, ossemu.MetadataOptions{}, &emu))
}

// jwt is an unsigned OIDC token expiring at exp, as a service account's
// projected token looks to the emulator.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:ml:trainer", "exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc(claims) + "." + enc([]byte("signature"))
}

// TestCredentialsRefreshJob: a job writing, reading back and listing
// objects without pause, through an OSS backend on an OIDC role (RRSA:
// credentials-go's provider, through the emulator's STS at its fixed
// https://sts.aliyuncs.com) and an S3 backend on a web identity role
// (IRSA: the AWS SDK's provider and credentials cache), for longer than
// three lifetimes of the 60-second keys the emulator issues and then
// refuses (SecurityTokenExpired, ExpiredToken), sees no error and loses no
// object. The first key of each is refused at the end: the job outlived
// it. It runs for 3 key lifetimes (just over 3 minutes) by design, in a
// package of its own so that it runs beside others.
func TestCredentialsRefreshJob(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(jwt(time.Now().Add(time.Hour))), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	start := time.Now()
	runFor := 3*keyLifetime + 5*time.Second

	// OSS: RRSA.
	oidc, err := providers.NewOIDCCredentialsProviderBuilder().WithRoleArn("acs:ram::1:role/reader").
		WithOIDCProviderARN("acs:ram::1:oidc-provider/ack-rrsa").WithOIDCTokenFilePath(tok).
		WithRoleSessionName("refresh-job").WithDurationSeconds(900).Build()
	if err != nil {
		t.Fatal(err)
	}
	first, err := oidc.GetCredentials()
	if err != nil {
		t.Fatalf("RRSA through the emulator's STS: %v", err)
	}
	u, _ := backends.ParseURI("oss://" + testBucket + "/refresh-oss/")
	ob, err := oss.New(ctx, u, oss.Options{Endpoint: emu.Endpoint, CredentialsProvider: oidc, MultipartThreshold: 1 << 20, PartSize: 1 << 20, Concurrency: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()

	// S3: IRSA.
	stsc := sts.New(sts.Options{BaseEndpoint: aws.String(emu.Endpoint), Region: "us-east-1"})
	irsa := aws.NewCredentialsCache(stscreds.NewWebIdentityRoleProvider(stsc, "arn:aws:iam::1:role/reader", stscreds.IdentityTokenFile(tok)),
		func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = 10 * time.Second })
	firstAWS, err := irsa.Retrieve(ctx)
	if err != nil {
		t.Fatalf("IRSA through the emulator's STS: %v", err)
	}
	su, _ := backends.ParseURI("s3://" + testBucket + "/refresh-s3/?endpoint=" + emu.Endpoint)
	sb, err := s3.New(ctx, su, s3.Options{CredentialsProvider: irsa, MultipartThreshold: 5 << 20, PartSize: 5 << 20, Concurrency: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()

	var g errgroup.Group
	for name, b := range map[string]backends.Backend{"oss": ob, "s3": sb} {
		g.Go(func() error { return refreshJob(ctx, b, name, start.Add(runFor)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 3*keyLifetime {
		t.Fatalf("the job ran %v, less than 3 key lifetimes", el)
	}

	// The keys the job started with are refused now: it ran across their
	// expiry, on renewed ones.
	raw, err := alioss.New(emu.Endpoint, first.AccessKeyId, first.AccessKeySecret, alioss.SecurityToken(first.SecurityToken),
		alioss.ForcePathStyle(true), alioss.AuthVersion(alioss.AuthV4), alioss.Region(oss.LocalRegion))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := raw.Bucket(testBucket)
	var se alioss.ServiceError
	if _, err := rb.ListObjectsV2(); !errors.As(err, &se) || se.Code != "SecurityTokenExpired" {
		t.Errorf("the job's first OSS key: %v, want SecurityTokenExpired", err)
	}
	c := awss3.New(awss3.Options{BaseEndpoint: aws.String(emu.Endpoint), UsePathStyle: true, Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return firstAWS, nil })})
	_, err = c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(testBucket)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ExpiredToken" {
		t.Errorf("the job's first S3 key: %v, want ExpiredToken", err)
	}
	t.Logf("keys issued by the emulator's STS: %d; requests refused as expired: %d", emu.Server.Stats()["sts.issued"], emu.Server.Stats()["sts.expired"])
}

// refreshJob writes objects of varied sizes (some multipart), reads each
// back, lists them now and then, until the deadline; then checks that
// every object written is listed and holds its bytes. Any error ends it.
func refreshJob(ctx context.Context, b backends.Backend, name string, until time.Time) error {
	const workers = 2
	// The job's pace: a training job's, not a load test's, so that the
	// test's three minutes cost the machine little.
	pace := rate.NewLimiter(5, 1)
	var mu sync.Mutex
	written := map[string]int{} // key -> size
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			for i := 0; time.Now().Before(until); i++ {
				if err := pace.Wait(ctx); err != nil {
					return err
				}
				size := 1 + rng.IntN(64<<10)
				if i%30 == 0 {
					size = 5<<20 + 1 + rng.IntN(1<<20) // multipart on both stores
				}
				data := make([]byte, size)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				key := fmt.Sprintf("w%d/obj-%05d", w, i)
				wr, err := b.Write(ctx, key, backends.WriteOptions{SizeHint: int64(size)})
				if err != nil {
					return fmt.Errorf("%s: write %s: %w", name, key, err)
				}
				if _, err := wr.Write(data); err != nil {
					return fmt.Errorf("%s: write %s: %w", name, key, err)
				}
				if _, err := wr.Commit(ctx); err != nil {
					return fmt.Errorf("%s: commit %s at %v: %w", name, key, time.Now().Format(time.TimeOnly), err)
				}
				mu.Lock()
				written[key] = size
				mu.Unlock()
				if err := readBack(ctx, b, key, data); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if i%10 == 0 {
					if _, err := b.List(ctx, backends.ListOptions{Prefix: fmt.Sprintf("w%d/", w)}); err != nil {
						return fmt.Errorf("%s: list: %w", name, err)
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Every object written is there, at its size (each was read back
	// whole right after its write).
	listed := map[string]int64{}
	opt := backends.ListOptions{Recursive: true}
	for {
		page, err := b.List(ctx, opt)
		if err != nil {
			return fmt.Errorf("%s: final list: %w", name, err)
		}
		for _, o := range page.Objects {
			listed[o.Key] = o.Size
		}
		if page.NextToken == "" {
			break
		}
		opt.Token = page.NextToken
	}
	for key, want := range written {
		if size, ok := listed[key]; !ok || size != int64(want) {
			return fmt.Errorf("%s: %s was written (%d bytes) and is listed: %v, %d bytes", name, key, want, ok, size)
		}
	}
	if len(written) < 3*workers {
		return fmt.Errorf("%s: only %d objects written", name, len(written))
	}
	return nil
}

func readBack(ctx context.Context, b backends.Backend, key string, want []byte) error {
	r, err := b.Read(ctx, key, backends.ReadOptions{Length: -1})
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("read %s: %d bytes differ from the %d written", key, len(got), len(want))
	}
	return nil
}
