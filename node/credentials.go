package node

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
)

// Credentials are what a mount request brings to reach its store: an OSS
// access key (and STS token), an HDFS user, a Kerberos principal and its
// keytab for a secured HDFS cluster. Empty fields fall back to the
// node's own configuration (its environment or --oss-credentials-file).
//
// The secret, the token and the keytab never leave this struct by
// formatting: String, GoString, LogValue and MarshalJSON all redact them. The daemon API moves
// them with its own wire type, in request bodies only.
type Credentials struct {
	OSSAccessKeyID     string
	OSSAccessKeySecret string
	OSSSecurityToken   string
	HDFSUser           string
	// HDFSPrincipal is the Kerberos principal (user@REALM) HDFSKeytab
	// holds keys for.
	HDFSPrincipal string
	// HDFSKeytab is a keytab, base64-encoded (so that every JSON form of
	// these credentials carries it intact). The backend gets its bytes in
	// memory; it is never written to disk.
	HDFSKeytab string
}

// IsZero reports whether no credential is set.
func (c Credentials) IsZero() bool { return c == Credentials{} }

func (c Credentials) redacted() string {
	if c.IsZero() {
		return "credentials{}"
	}
	return fmt.Sprintf("credentials{oss_access_key_id=%q hdfs_user=%q hdfs_principal=%q secret=redacted}", c.OSSAccessKeyID, c.HDFSUser, c.HDFSPrincipal)
}

// String redacts the secret and the token.
func (c Credentials) String() string { return c.redacted() }

// GoString redacts %#v as well.
func (c Credentials) GoString() string { return c.redacted() }

// LogValue redacts in slog records (text and JSON).
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("oss_access_key_id", c.OSSAccessKeyID), slog.String("hdfs_user", c.HDFSUser), slog.String("hdfs_principal", c.HDFSPrincipal))
}

// MarshalJSON redacts in JSON.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"oss_access_key_id":%q,"hdfs_user":%q,"hdfs_principal":%q}`, c.OSSAccessKeyID, c.HDFSUser, c.HDFSPrincipal)), nil
}

// fingerprint identifies the credentials without revealing them, to tell
// whether two requests carry the same ones (a salted hash: it is kept only
// in memory and compared, never logged or written).
func (c Credentials) fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "mlfsd-credentials\x00%s\x00%s\x00%s\x00%s", c.OSSAccessKeyID, c.OSSAccessKeySecret, c.OSSSecurityToken, c.HDFSUser)
	if c.HDFSPrincipal != "" || c.HDFSKeytab != "" {
		fmt.Fprintf(h, "\x00%s\x00%s", c.HDFSPrincipal, c.HDFSKeytab)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// validKeytab checks the Kerberos credentials' form; the error never
// quotes the keytab.
func (c Credentials) validKeytab() error {
	if c.HDFSKeytab == "" {
		return nil
	}
	if c.HDFSPrincipal == "" {
		return errors.New("credentials: an HDFS keytab needs its principal (hdfs_principal, user@REALM)")
	}
	if _, err := base64.StdEncoding.DecodeString(c.HDFSKeytab); err != nil {
		return errors.New("credentials: the HDFS keytab is not valid base64")
	}
	return nil
}
