package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// everyCredential returns valid credentials that, between them, set every
// row of the credentials table (a role and keys for one store exclude
// each other), each to a value of its own. It fails the test if a row of
// the table is left out: a row added later is covered by every test that
// uses it.
func everyCredential(t *testing.T) []Credentials {
	t.Helper()
	cs := []Credentials{
		{OSSAccessKeyID: "LTAI-oss-id", OSSAccessKeySecret: "oss-secret-v4lue", OSSSecurityToken: "oss-sts-t0ken",
			S3RoleARN: "arn:aws:iam::123456789012:role/train", S3WebIdentityToken: "eyJ-s3-web-identity-t0ken", HDFSUser: "alice"},
		{OSSRoleARN: "acs:ram::1234:role/train", OSSOIDCProviderARN: "acs:ram::1234:oidc-provider/ack", OSSOIDCToken: "eyJ-oss-oidc-t0ken",
			S3AccessKeyID: "AKIA-s3-id", S3SecretAccessKey: "s3-secret-v4lue", S3SessionToken: "s3-session-t0ken",
			HDFSPrincipal: "alice@MLFSD.TEST", HDFSKeytab: "BQIAAABrM3l0YWItYnl0ZXM="},
	}
	for _, f := range CredentialTable() {
		set := false
		for i := range cs {
			set = set || *f.p(&cs[i]) != ""
		}
		if !set {
			t.Fatalf("everyCredential sets no %s: add it", f.Name)
		}
	}
	for _, c := range cs {
		if err := c.Validate(); err != nil {
			t.Fatalf("everyCredential: %v", err)
		}
	}
	return cs
}

// assertNoSecret fails if out holds any secret of c.
func assertNoSecret(t *testing.T, out string, c Credentials) {
	t.Helper()
	for _, f := range CredentialTable() {
		if v := *f.p(&c); f.Secret && v != "" && strings.Contains(out, v) {
			t.Errorf("secret %s leaked: %s", f.Name, out)
		}
	}
}

// TestCredentialTableRoundTrip: every kind of credential goes through the
// wire (API bodies and the handover: WireName keys) and through CSI
// secrets (Name keys) unchanged.
func TestCredentialTableRoundTrip(t *testing.T) {
	for _, c := range everyCredential(t) {
		for _, wire := range []bool{false, true} {
			back, err := CredentialsFromFields(c.Fields(wire), wire)
			if err != nil || back != c {
				t.Errorf("wire=%v: %v, %v", wire, back, err)
			}
		}
		data, err := json.Marshal(SecretCredentials{c})
		if err != nil {
			t.Fatal(err)
		}
		var back SecretCredentials
		if err := json.Unmarshal(data, &back); err != nil || back.Credentials != c {
			t.Errorf("JSON: %v, %v", back, err)
		}
	}
	if _, err := CredentialsFromFields(map[string]string{"oss_access_key_id": "x"}, false); err == nil || !strings.Contains(err.Error(), "oss_access_key_id") {
		t.Errorf("a wire name among secret keys: %v", err)
	}
}

// TestCredentialsValidate: an incomplete or ambiguous identity is refused
// with the names of the fields at fault, never a value.
func TestCredentialsValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Credentials
		want string
	}{
		{Credentials{OSSAccessKeyID: "id"}, "oss-access-key-secret"},
		{Credentials{OSSAccessKeySecret: "hunter2"}, "oss-access-key-id"},
		{Credentials{OSSSecurityToken: "hunter2"}, "oss-security-token needs oss-access-key-id"},
		{Credentials{OSSRoleARN: "acs:ram::1:role/r", OSSOIDCToken: "hunter2"}, "oss-oidc-provider-arn"},
		{Credentials{OSSRoleARN: "acs:ram::1:role/r", OSSOIDCProviderARN: "p"}, "oss-oidc-token"},
		{Credentials{OSSOIDCToken: "hunter2"}, "oss-oidc-token needs oss-role-arn"},
		{Credentials{OSSAccessKeyID: "id", OSSAccessKeySecret: "hunter2", OSSRoleARN: "r", OSSOIDCProviderARN: "p", OSSOIDCToken: "hunter2"}, "not both"},
		{Credentials{S3AccessKeyID: "id"}, "s3-secret-access-key"},
		{Credentials{S3SessionToken: "hunter2"}, "s3-session-token needs s3-access-key-id"},
		{Credentials{S3RoleARN: "arn:aws:iam::1:role/r"}, "s3-web-identity-token"},
		{Credentials{S3WebIdentityToken: "hunter2"}, "s3-role-arn"},
		{Credentials{S3AccessKeyID: "id", S3SecretAccessKey: "hunter2", S3RoleARN: "r", S3WebIdentityToken: "hunter2"}, "not both"},
		{Credentials{HDFSUser: "a\nb"}, "hdfs-user contains"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.c, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}

// TestCredentialsRedacted: formatted, logged (text and JSON) or marshalled,
// credentials of every kind show their public fields (which help to
// debug) and none of their secrets.
func TestCredentialsRedacted(t *testing.T) {
	for _, c := range everyCredential(t) {
		var logged strings.Builder
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "credentials", c)
		slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "credentials", c, "req", MountRequest{Credentials: c})
		j, _ := json.Marshal(c)
		jp, _ := json.Marshal(struct{ C *Credentials }{&c})
		outs := []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v", &c), string(j), string(jp), logged.String(),
			fmt.Sprintf("%v %+v", MountRequest{Credentials: c}, MountRequest{Credentials: c}), SecretCredentials{c}.String()}
		for _, out := range outs {
			assertNoSecret(t, out, c)
			pub := c.OSSAccessKeyID + c.OSSRoleARN
			if !strings.Contains(out, pub) {
				t.Errorf("public field %q missing (it helps to debug): %s", pub, out)
			}
		}
	}
}

// TestSameIdentity: a republish with a fresh token or rotated secret is
// the same identity; another key ID, role or user is not.
func TestSameIdentity(t *testing.T) {
	a := Credentials{S3RoleARN: "arn:aws:iam::1:role/r", S3WebIdentityToken: "t1"}
	b := a
	b.S3WebIdentityToken = "t2"
	if !sameIdentity(a, b) {
		t.Error("a new token is not the same identity")
	}
	b.S3RoleARN = "arn:aws:iam::1:role/other"
	if sameIdentity(a, b) {
		t.Error("another role is the same identity")
	}
	if sameIdentity(Credentials{}, Credentials{HDFSUser: "u"}) {
		t.Error("a user is the node's identity")
	}
}
