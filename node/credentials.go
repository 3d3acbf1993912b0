package node

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
)

// Credentials are what a mount request brings to reach its store, for
// every scheme: OSS keys (and an STS token) or an OSS RAM role to assume
// with an OIDC token (RRSA); S3 keys (and a session token) or an IAM role
// to assume with a web identity token (IRSA); an HDFS user. Empty fields
// fall back to the node's own configuration (its environment, credentials
// files, its SDKs' default chains). A role is assumed by the node, which
// refreshes the keys it gets before they expire (see identity.go).
//
// Every field is a row of CredentialTable, the one place that names it on
// the wire (API bodies, the handover socket, CSI secrets), says whether it
// is secret, and checks it. The secrets never leave this struct by
// formatting: String, GoString, LogValue and MarshalJSON all redact them;
// only Fields hands them out, for the wire.
type Credentials struct {
	OSSAccessKeyID     string
	OSSAccessKeySecret string
	OSSSecurityToken   string
	// OSS RRSA: the RAM role, the OIDC provider of the cluster, and the
	// pod's service-account token, exchanged for keys by
	// AssumeRoleWithOIDC.
	OSSRoleARN         string
	OSSOIDCProviderARN string
	OSSOIDCToken       string

	S3AccessKeyID     string
	S3SecretAccessKey string
	S3SessionToken    string
	// S3 IRSA: the IAM role and the pod's service-account token,
	// exchanged for keys by AssumeRoleWithWebIdentity.
	S3RoleARN          string
	S3WebIdentityToken string

	HDFSUser string
	// Kerberized HDFS: the principal (user@REALM) and its keytab,
	// base64-encoded so that every JSON form carries it intact. The
	// backend gets the keytab's bytes in memory; it is never written to
	// disk.
	HDFSPrincipal string
	HDFSKeytab    string
}

// CredentialField is one row of the credentials table.
type CredentialField struct {
	// Name is the field's key: of a CSI publish secret as written
	// ("oss-access-key-id"), and with '_' for '-' of the daemon API's and
	// the handover's JSON ("oss_access_key_id").
	Name string
	// Secret fields are never formatted, logged or written in the clear.
	Secret bool
	Help   string
	p      func(*Credentials) *string
}

// WireName is the field's key in JSON bodies.
func (f CredentialField) WireName() string { return strings.ReplaceAll(f.Name, "-", "_") }

// CredentialTable returns every kind of credential a mount can bring.
func CredentialTable() []CredentialField {
	return []CredentialField{
		{"oss-access-key-id", false, "OSS AccessKey ID", func(c *Credentials) *string { return &c.OSSAccessKeyID }},
		{"oss-access-key-secret", true, "OSS AccessKey secret", func(c *Credentials) *string { return &c.OSSAccessKeySecret }},
		{"oss-security-token", true, "OSS STS security token of a temporary key", func(c *Credentials) *string { return &c.OSSSecurityToken }},
		{"oss-role-arn", false, "RAM role to assume with an OIDC token (RRSA), acs:ram::UID:role/NAME", func(c *Credentials) *string { return &c.OSSRoleARN }},
		{"oss-oidc-provider-arn", false, "the cluster's OIDC provider for RRSA, acs:ram::UID:oidc-provider/NAME", func(c *Credentials) *string { return &c.OSSOIDCProviderARN }},
		{"oss-oidc-token", true, "the pod's service-account token (RRSA)", func(c *Credentials) *string { return &c.OSSOIDCToken }},
		{"s3-access-key-id", false, "AWS access key ID", func(c *Credentials) *string { return &c.S3AccessKeyID }},
		{"s3-secret-access-key", true, "AWS secret access key", func(c *Credentials) *string { return &c.S3SecretAccessKey }},
		{"s3-session-token", true, "AWS session token of temporary credentials", func(c *Credentials) *string { return &c.S3SessionToken }},
		{"s3-role-arn", false, "IAM role to assume with a web identity token (IRSA), arn:aws:iam::ACCOUNT:role/NAME", func(c *Credentials) *string { return &c.S3RoleARN }},
		{"s3-web-identity-token", true, "the pod's service-account token (IRSA)", func(c *Credentials) *string { return &c.S3WebIdentityToken }},
		{"hdfs-user", false, "HDFS user (simple authentication)", func(c *Credentials) *string { return &c.HDFSUser }},
		{"hdfs-principal", false, "Kerberos principal of a secured HDFS cluster, user@REALM", func(c *Credentials) *string { return &c.HDFSPrincipal }},
		{"hdfs-keytab", true, "the principal's keytab, base64 (a CSI secret holds the file's bytes)", func(c *Credentials) *string { return &c.HDFSKeytab }},
	}
}

// CredentialNames lists the table's names (wire: its WireNames), for
// messages.
func CredentialNames(wire bool) []string {
	var out []string
	for _, f := range CredentialTable() {
		if wire {
			out = append(out, f.WireName())
		} else {
			out = append(out, f.Name)
		}
	}
	return out
}

// CredentialsFromFields builds Credentials from keys of the table (by Name,
// or by WireName when wire is set) and validates them. An unknown key is
// an error naming it (a typo would otherwise silently fall back to the
// node's own identity); no error ever shows a value.
func CredentialsFromFields(fields map[string]string, wire bool) (Credentials, error) {
	var c Credentials
	byName := map[string]CredentialField{}
	for _, f := range CredentialTable() {
		if wire {
			byName[f.WireName()] = f
		} else {
			byName[f.Name] = f
		}
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key reported is the same every time
	for _, k := range keys {
		f, ok := byName[k]
		if !ok {
			return Credentials{}, fmt.Errorf("credential %q: unknown (want one of %s)", k, strings.Join(CredentialNames(wire), ", "))
		}
		*f.p(&c) = fields[k]
	}
	if err := c.Validate(); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// Fields returns the set fields by Name (wire: by WireName), secrets
// included: for the wire only.
func (c Credentials) Fields(wire bool) map[string]string {
	out := map[string]string{}
	for _, f := range CredentialTable() {
		if v := *f.p(&c); v != "" {
			if wire {
				out[f.WireName()] = v
			} else {
				out[f.Name] = v
			}
		}
	}
	return out
}

// Validate checks that what is set makes one usable identity per store.
// The error names the fields, never a value.
func (c Credentials) Validate() error {
	for _, f := range CredentialTable() {
		if strings.ContainsAny(*f.p(&c), "\x00\n\r") {
			return fmt.Errorf("credential %s contains a NUL or line break", f.Name)
		}
	}
	var errs []error
	both := func(a, b string, av, bv string) {
		if (av == "") != (bv == "") {
			errs = append(errs, fmt.Errorf("credentials %s and %s go together: one is missing", a, b))
		}
	}
	needs := func(a string, av string, b string, bv string) {
		if av != "" && bv == "" {
			errs = append(errs, fmt.Errorf("credential %s needs %s", a, b))
		}
	}
	excl := func(store string, keys, role bool) {
		if keys && role {
			errs = append(errs, fmt.Errorf("%s credentials: give access keys or a role to assume, not both", store))
		}
	}
	both("oss-access-key-id", "oss-access-key-secret", c.OSSAccessKeyID, c.OSSAccessKeySecret)
	needs("oss-security-token", c.OSSSecurityToken, "oss-access-key-id", c.OSSAccessKeyID)
	needs("oss-role-arn", c.OSSRoleARN, "oss-oidc-provider-arn", c.OSSOIDCProviderARN)
	needs("oss-oidc-provider-arn", c.OSSOIDCProviderARN, "oss-role-arn", c.OSSRoleARN)
	needs("oss-role-arn", c.OSSRoleARN, "oss-oidc-token", c.OSSOIDCToken)
	needs("oss-oidc-token", c.OSSOIDCToken, "oss-role-arn", c.OSSRoleARN)
	excl("OSS", c.OSSAccessKeyID != "", c.OSSRoleARN != "")
	both("s3-access-key-id", "s3-secret-access-key", c.S3AccessKeyID, c.S3SecretAccessKey)
	needs("s3-session-token", c.S3SessionToken, "s3-access-key-id", c.S3AccessKeyID)
	needs("s3-role-arn", c.S3RoleARN, "s3-web-identity-token", c.S3WebIdentityToken)
	needs("s3-web-identity-token", c.S3WebIdentityToken, "s3-role-arn", c.S3RoleARN)
	excl("S3", c.S3AccessKeyID != "", c.S3RoleARN != "")
	both("hdfs-principal", "hdfs-keytab", c.HDFSPrincipal, c.HDFSKeytab)
	if err := c.validKeytab(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// IsZero reports whether no credential is set.
func (c Credentials) IsZero() bool { return c == Credentials{} }

// public is c with every secret field cleared: who the credentials say
// the mount is, without what proves it.
func (c Credentials) public() Credentials {
	for _, f := range CredentialTable() {
		if f.Secret {
			*f.p(&c) = ""
		}
	}
	return c
}

// sameIdentity reports whether a and b name the same principal (key IDs,
// roles, user), whatever their secrets: a republish that brings a fresh
// token or rotated keys for it refreshes a live mount in place.
func sameIdentity(a, b Credentials) bool { return a.public() == b.public() }

func (c Credentials) redacted() string {
	if c.IsZero() {
		return "credentials{}"
	}
	var parts []string
	for _, f := range CredentialTable() {
		v := *f.p(&c)
		switch {
		case v == "":
		case f.Secret:
			parts = append(parts, f.WireName()+"=redacted")
		default:
			parts = append(parts, fmt.Sprintf("%s=%q", f.WireName(), v))
		}
	}
	return "credentials{" + strings.Join(parts, " ") + "}"
}

// String redacts the secrets.
func (c Credentials) String() string { return c.redacted() }

// GoString redacts %#v as well.
func (c Credentials) GoString() string { return c.redacted() }

// LogValue redacts in slog records (text and JSON): the public fields
// show, a secret only as "redacted".
func (c Credentials) LogValue() slog.Value {
	var as []slog.Attr
	for _, f := range CredentialTable() {
		v := *f.p(&c)
		switch {
		case v == "":
		case f.Secret:
			as = append(as, slog.String(f.WireName(), "redacted"))
		default:
			as = append(as, slog.String(f.WireName(), v))
		}
	}
	return slog.GroupValue(as...)
}

// MarshalJSON redacts in JSON: only the public fields.
func (c Credentials) MarshalJSON() ([]byte, error) {
	out := map[string]string{}
	for _, f := range CredentialTable() {
		if v := *f.p(&c); v != "" && !f.Secret {
			out[f.WireName()] = v
		}
	}
	return json.Marshal(out)
}

// fingerprint identifies the credentials without revealing them, to tell
// whether two requests carry the same ones (a hash: it is kept only in
// memory and compared, never logged or written).
func (c Credentials) fingerprint() string {
	h := sha256.New()
	h.Write([]byte("mlfsd-credentials"))
	for _, f := range CredentialTable() {
		fmt.Fprintf(h, "\x00%s=%s", f.Name, *f.p(&c))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SecretCredentials are Credentials on a wire that carries them whole: the
// daemon API's request bodies and the handover socket, both root's alone.
// In JSON they hold every field of the table by WireName, secrets
// included, and are validated when read; formatted or logged they are
// redacted as Credentials are.
type SecretCredentials struct{ Credentials }

// MarshalJSON writes every set field, secrets included.
func (s SecretCredentials) MarshalJSON() ([]byte, error) { return json.Marshal(s.Fields(true)) }

// UnmarshalJSON reads the fields by WireName; an unknown key or an
// incomplete identity is an error naming the fields.
func (s *SecretCredentials) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("credentials: want an object of strings")
	}
	c, err := CredentialsFromFields(m, true)
	if err != nil {
		return err
	}
	s.Credentials = c
	return nil
}

// validKeytab checks the Kerberos keytab's form; the error never quotes
// it.
func (c Credentials) validKeytab() error {
	if c.HDFSKeytab == "" {
		return nil
	}
	if _, err := base64.StdEncoding.DecodeString(c.HDFSKeytab); err != nil {
		return errors.New("credential hdfs-keytab is not valid base64")
	}
	return nil
}
