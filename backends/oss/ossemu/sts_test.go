package ossemu_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
)

// testJWT is an unsigned JWT with the given expiry (what the emulator
// checks of a service-account token).
func testJWT(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:ns:sa", "aud": "sts.aliyuncs.com", "exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + enc([]byte("sig"))
}

// waitExpired polls until t (a key's expiry) has passed: the emulator's
// clock is the wall clock.
func waitExpired(t *testing.T, until time.Time) {
	t.Helper()
	time.Sleep(time.Until(until.Add(10 * time.Millisecond))) // the expiry is the behaviour under test
}

// TestSTSWebIdentity: the AWS SDK's own STS client gets keys from
// AssumeRoleWithWebIdentity; the S3 client lists with them; once they
// expire S3 requests get 400 ExpiredToken; a wrong role is AccessDenied,
// an expired token ExpiredTokenException.
func TestSTSWebIdentity(t *testing.T) {
	srv, ep, _ := ossemutest.StartBucket(t, bucketName, ossemu.Options{STSDuration: 2 * time.Second, STSRoles: []string{"arn:aws:iam::123456789012:role/reader"}})
	ctx := context.Background()
	c := sts.New(sts.Options{BaseEndpoint: aws.String(ep), Region: "us-east-1"})
	out, err := c.AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String("arn:aws:iam::123456789012:role/reader"), RoleSessionName: aws.String("s"),
		WebIdentityToken: aws.String(testJWT(time.Now().Add(time.Hour)))})
	if err != nil {
		t.Fatal(err)
	}
	cr := out.Credentials
	if !strings.HasPrefix(aws.ToString(cr.AccessKeyId), "STS.") || aws.ToString(cr.SessionToken) == "" || time.Until(aws.ToTime(cr.Expiration)) > 3*time.Second {
		t.Fatalf("issued %s, token %d bytes, expiring %v", aws.ToString(cr.AccessKeyId), len(aws.ToString(cr.SessionToken)), cr.Expiration)
	}
	s3c := s3.New(s3.Options{BaseEndpoint: aws.String(ep), UsePathStyle: true, Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: *cr.AccessKeyId, SecretAccessKey: *cr.SecretAccessKey, SessionToken: *cr.SessionToken}, nil
		}), RetryMaxAttempts: 1})
	if _, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucketName)}); err != nil {
		t.Fatalf("listing with the issued key: %v", err)
	}
	waitExpired(t, aws.ToTime(cr.Expiration).Add(time.Second)) // Expiration has whole seconds
	_, err = s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucketName)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ExpiredToken" {
		t.Fatalf("listing with an expired key: %v, want ExpiredToken", err)
	}
	_, err = c.AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String("arn:aws:iam::123456789012:role/other"), RoleSessionName: aws.String("s"),
		WebIdentityToken: aws.String(testJWT(time.Now().Add(time.Hour)))})
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Fatalf("wrong role: %v, want AccessDenied", err)
	}
	_, err = c.AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String("arn:aws:iam::123456789012:role/reader"), RoleSessionName: aws.String("s"),
		WebIdentityToken: aws.String(testJWT(time.Now().Add(-time.Minute)))})
	if !errors.As(err, &ae) || ae.ErrorCode() != "ExpiredTokenException" {
		t.Fatalf("expired token: %v, want ExpiredTokenException", err)
	}
	if st := srv.Stats(); st["sts.expired"] != 1 || st["sts.issued"] != 1 {
		t.Errorf("stats %v: want 1 issued, 1 refused as expired", st)
	}
}

// assumeOIDC posts AssumeRoleWithOIDC as Alibaba Cloud's SDKs do.
func assumeOIDC(t *testing.T, ep, role, token string) (int, map[string]any) {
	t.Helper()
	form := url.Values{"RoleArn": {role}, "OIDCProviderArn": {"acs:ram::1:oidc-provider/ack"}, "OIDCToken": {token},
		"RoleSessionName": {"s"}, "DurationSeconds": {"3600"}}
	resp, err := http.Post(ep+"/?Action=AssumeRoleWithOIDC&Format=JSON&Version=2015-04-01", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("AssumeRoleWithOIDC answered %s: %v", b, err)
	}
	return resp.StatusCode, out
}

// TestSTSOIDC: AssumeRoleWithOIDC issues a key the OSS SDK then uses with
// its security token; expired, it gets 403 SecurityTokenExpired; without
// the token, InvalidSecurityToken; a wrong role and an expired OIDC token
// are refused with Alibaba Cloud's codes.
func TestSTSOIDC(t *testing.T) {
	_, ep, _ := ossemutest.StartBucket(t, bucketName, ossemu.Options{STSDuration: 2 * time.Second, STSRoles: []string{"acs:ram::1:role/reader"}})
	st, out := assumeOIDC(t, ep, "acs:ram::1:role/reader", testJWT(time.Now().Add(time.Hour)))
	if st != http.StatusOK {
		t.Fatalf("AssumeRoleWithOIDC: %d %v", st, out)
	}
	cr := out["Credentials"].(map[string]any)
	exp, err := time.Parse("2006-01-02T15:04:05Z", cr["Expiration"].(string))
	if err != nil {
		t.Fatal(err)
	}
	client := func(withToken bool) *alioss.Bucket {
		opts := []alioss.ClientOption{alioss.ForcePathStyle(true), alioss.AuthVersion(alioss.AuthV4), alioss.Region("cn-hangzhou")}
		if withToken {
			opts = append(opts, alioss.SecurityToken(cr["SecurityToken"].(string)))
		}
		c, err := alioss.New(ep, cr["AccessKeyId"].(string), cr["AccessKeySecret"].(string), opts...)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := c.Bucket(bucketName)
		return b
	}
	if err := client(true).PutObject("k", bytes.NewReader([]byte("v"))); err != nil {
		t.Fatalf("PUT with the issued key: %v", err)
	}
	var se alioss.ServiceError
	if _, err := client(false).ListObjectsV2(); !errors.As(err, &se) || se.Code != "InvalidSecurityToken" {
		t.Fatalf("without the token: %v, want InvalidSecurityToken", err)
	}
	waitExpired(t, exp.Add(time.Second)) // Expiration has whole seconds
	if _, err := client(true).ListObjectsV2(); !errors.As(err, &se) || se.Code != "SecurityTokenExpired" || se.StatusCode != http.StatusForbidden {
		t.Fatalf("expired: %v, want 403 SecurityTokenExpired", err)
	}
	for _, c := range []struct {
		role, token, code string
	}{
		{"acs:ram::1:role/other", testJWT(time.Now().Add(time.Hour)), "EntityNotExist.Role"},
		{"not-an-arn", testJWT(time.Now().Add(time.Hour)), "InvalidParameter.RoleArn"},
		{"acs:ram::1:role/reader", testJWT(time.Now().Add(-time.Minute)), "AuthenticationFail.OIDCToken.Expired"},
		{"acs:ram::1:role/reader", "garbage", "AuthenticationFail.OIDCToken.Invalid"},
	} {
		st, out := assumeOIDC(t, ep, c.role, c.token)
		if st == http.StatusOK || out["Code"] != c.code {
			t.Errorf("%s with %.20s: %d %v, want %s", c.role, c.token, st, out, c.code)
		}
		if s := fmt.Sprint(out); strings.Contains(s, c.token) && len(c.token) > 10 {
			t.Errorf("the error repeats the token: %s", s)
		}
	}
}

// TestMetadataHardenedMode: with RequireToken the instance metadata
// answers only a request carrying a session token from PUT
// /latest/api/token (401 otherwise, as ECS's hardened mode and IMDSv2
// do), and the key it hands out works on the store.
func TestMetadataHardenedMode(t *testing.T) {
	srv, ep, _ := ossemutest.StartBucket(t, bucketName, ossemu.Options{})
	md := ossemutest.StartMetadata(t, srv, ossemu.MetadataOptions{RoleName: "r", RequireToken: true})
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, md+path, nil)
		if tok != "" {
			req.Header.Set("X-aliyun-ecs-metadata-token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get("/latest/meta-data/ram/security-credentials/", ""); st != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", st)
	}
	if st, _ := get("/latest/meta-data/ram/security-credentials/", "made-up"); st != http.StatusUnauthorized {
		t.Fatalf("with a made-up token: %d, want 401", st)
	}
	req, _ := http.NewRequest(http.MethodPut, md+"/latest/api/token", nil)
	req.Header.Set("X-aliyun-ecs-metadata-token-ttl-seconds", "60")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if st, role := get("/latest/meta-data/ram/security-credentials/", string(tok)); st != http.StatusOK || role != "r" {
		t.Fatalf("with the token: %d %q", st, role)
	}
	st, body := get("/latest/meta-data/ram/security-credentials/r", string(tok))
	var cr map[string]string
	if st != http.StatusOK || json.Unmarshal([]byte(body), &cr) != nil || cr["Code"] != "Success" {
		t.Fatalf("role credentials: %d %s", st, body)
	}
	c, err := alioss.New(ep, cr["AccessKeyId"], cr["AccessKeySecret"], alioss.SecurityToken(cr["SecurityToken"]), alioss.ForcePathStyle(true),
		alioss.AuthVersion(alioss.AuthV4), alioss.Region("cn-hangzhou"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Bucket(bucketName)
	if _, err := b.ListObjectsV2(); err != nil {
		t.Fatalf("listing with the instance role's key: %v", err)
	}
}
