package csidriver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/mounthelper"
	"github.com/mlfsd/mlfsd/node"
)

// Keys of volume attributes (a PersistentVolume's volumeAttributes, an
// inline volume's volumeAttributes) and of StorageClass parameters.
const (
	// AttrURI names the channel: for a volume, exactly what is mounted;
	// for a StorageClass, the base under which each volume gets a prefix.
	AttrURI = "uri"
	// AttrMode is "input" (read-only, cached; the default) or "output"
	// (write-back).
	AttrMode = "mode"
	// AttrSharedCache names the shared block-cache tier an input volume
	// reads through between the node's disk cache and its source (a
	// directory URI; see docs/SHARED-CACHE.md). It is the mount option
	// --shared-cache, like AttrSharedCacheSize (--shared-cache-size); the
	// daemon's own --shared-cache is the default of volumes without one.
	// The tier's store is reached with the daemon's credentials, not the
	// volume's secrets.
	AttrSharedCache     = "shared-cache"
	AttrSharedCacheSize = "shared-cache-size"
	// AttrAllowEmpty is the mount option --allow-empty: an input volume
	// that holds nothing mounts instead of failing. CreateVolume sets it
	// on the volumes it provisions (they start empty) unless the
	// StorageClass says otherwise.
	AttrAllowEmpty = "allow-empty"
	// ParamOnDelete is a StorageClass parameter: "retain" (the default)
	// keeps a deleted volume's data in the store, "delete" removes it.
	ParamOnDelete = "onDelete"

	// k8sPrefix starts the keys Kubernetes adds on its own (pod info,
	// the ephemeral flag, the provisioner's secret references).
	k8sPrefix = "csi.storage.k8s.io/"
	// ephemeralKey is set to "true" by kubelet for CSI inline volumes.
	ephemeralKey = k8sPrefix + "ephemeral"
	// TokensKey is set by kubelet, when the CSIDriver object has
	// tokenRequests, to the pod's service-account tokens: JSON
	// {"<audience>": {"token": "...", "expirationTimestamp": "..."}}.
	TokensKey = k8sPrefix + "serviceAccount.tokens"

	// AttrOSSRoleARN names the RAM role a volume's pod assumes for OSS
	// with its service-account token (RRSA): AssumeRoleWithOIDC, with the
	// cluster's OIDC provider AttrOSSOIDCProviderARN. The token is the
	// pod's for audience Options.OSSAudience.
	AttrOSSRoleARN         = "oss-role-arn"
	AttrOSSOIDCProviderARN = "oss-oidc-provider-arn"
	// AttrS3RoleARN names the IAM role a volume's pod assumes for S3 with
	// its service-account token (IRSA): AssumeRoleWithWebIdentity. The
	// token is the pod's for audience Options.S3Audience.
	AttrS3RoleARN = "s3-role-arn"
	// AttrWarm "true" warms an input volume's cache at publish: its data
	// is fetched into the node's cache (and the shared tier it reads
	// through) in the background, with the volume's own credentials;
	// publish is not held for it, and `mlfsd cache du` shows its progress.
	// "false" (the default) does not.
	AttrWarm = "warm"
)

// Audiences of the service-account tokens the CSIDriver object asks for.
const (
	// DefaultOSSAudience is what Alibaba Cloud's STS expects of an RRSA
	// token (ACK's own RRSA webhook asks for it).
	DefaultOSSAudience = "sts.aliyuncs.com"
	// DefaultS3Audience is what AWS STS expects of an IRSA token.
	DefaultS3Audience = "sts.amazonaws.com"
)

// Modes of a volume.
const (
	ModeInput  = "input"
	ModeOutput = "output"
)

// Keys of the publish secrets (a Secret named by nodePublishSecretRef, or
// by the provisioner/deleter secret parameters of a StorageClass): the
// names of node.CredentialTable, of which these are the common ones.
const (
	SecretOSSAccessKeyID     = "oss-access-key-id"
	SecretOSSAccessKeySecret = "oss-access-key-secret"
	SecretOSSSecurityToken   = "oss-security-token"
	SecretHDFSUser           = "hdfs-user"
	SecretS3AccessKeyID      = "s3-access-key-id"
	SecretS3SecretAccessKey  = "s3-secret-access-key"
	SecretS3SessionToken     = "s3-session-token"
)

// volumeSpec is a volume's attributes, parsed and validated.
type volumeSpec struct {
	uri     backends.URI
	output  bool
	options map[string]string // mount options by table name (validated)
	// Roles the pod assumes with its service-account token.
	ossRole, ossProvider, s3Role string
	// warm: warm the volume's cache at publish (AttrWarm).
	warm bool
}

// parseAttributes reads a volume's attributes. Any bad value is an error
// naming its key. extra lists keys that are accepted but not mount options
// (onDelete in StorageClass parameters).
func parseAttributes(attrs map[string]string, extra ...string) (volumeSpec, error) {
	var s volumeSpec
	raw, ok := attrs[AttrURI]
	if !ok || raw == "" {
		return s, fmt.Errorf("volume attribute %q is required (oss://bucket/prefix/, hdfs://..., nas:///path/)", AttrURI)
	}
	u, err := backends.ParseURI(raw)
	if err != nil {
		return s, fmt.Errorf("volume attribute %q: %w", AttrURI, err)
	}
	s.uri = u
	switch m := attrs[AttrMode]; m {
	case "", ModeInput:
	case ModeOutput:
		s.output = true
		if !u.IsDir() {
			return s, fmt.Errorf("volume attribute %q: an output must be a directory URI (end %q with '/')", AttrURI, raw)
		}
	default:
		return s, fmt.Errorf("volume attribute %q: %q is neither %q nor %q", AttrMode, m, ModeInput, ModeOutput)
	}
	s.options = map[string]string{}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key reported is the same every time
	for _, k := range keys {
		switch {
		case k == AttrURI || k == AttrMode || strings.HasPrefix(k, k8sPrefix) || contains(extra, k):
			continue
		case k == AttrOSSRoleARN:
			s.ossRole = attrs[k]
			continue
		case k == AttrOSSOIDCProviderARN:
			s.ossProvider = attrs[k]
			continue
		case k == AttrS3RoleARN:
			s.s3Role = attrs[k]
			continue
		case k == AttrWarm:
			switch v := attrs[k]; v {
			case "true":
				s.warm = true
			case "false":
			default:
				return s, fmt.Errorf("volume attribute %q: %q is neither \"true\" nor \"false\"", AttrWarm, v)
			}
			continue
		}
		s.options[k] = attrs[k]
	}
	if err := validateOptions(s.options); err != nil {
		return s, err
	}
	if s.warm && s.output {
		return s, fmt.Errorf("volume attribute %q: only an input volume is cached, and this one is an output (%s: %q)", AttrWarm, AttrMode, ModeOutput)
	}
	if (s.ossRole == "") != (s.ossProvider == "") {
		return s, fmt.Errorf("volume attributes %q and %q go together (RRSA): one is missing", AttrOSSRoleARN, AttrOSSOIDCProviderARN)
	}
	return s, nil
}

// withMountFlags adds a PersistentVolume's mountOptions (the volume
// capability's mount flags: ro, allow_other, uid=1000, file_mode=0440,
// ...), parsed as fstab's -o options are (mounthelper.ParseOptions), to
// the volume's options, and reports whether ro was among them. A flag and
// an attribute that disagree, a node setting, daemon= and log_file= are
// errors naming the flag.
func withMountFlags(s volumeSpec, flags []string) (volumeSpec, bool, error) {
	if len(flags) == 0 {
		return s, false, nil
	}
	h, err := mounthelper.ParseOptions(flags)
	if err != nil {
		return s, false, fmt.Errorf("mount options: %w", err)
	}
	if h.Daemon != "" || h.LogFile != "" {
		return s, false, errors.New("mount options: daemon= and log_file= are for fstab lines, not for a volume")
	}
	if len(h.Flags) != len(h.MountOptions) {
		return s, false, fmt.Errorf("mount options %v: node settings; set them on the mlfsd daemon, not per volume", h.Flags)
	}
	names := make([]string, 0, len(h.MountOptions))
	for k := range h.MountOptions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := h.MountOptions[k]
		if prev, ok := s.options[k]; ok && prev != v {
			return s, false, fmt.Errorf("mount option %s=%s: volume attribute %q says %q; give it once", strings.ReplaceAll(k, "-", "_"), v, k, prev)
		}
		s.options[k] = v
	}
	return s, h.ReadOnly, nil
}

// validateOptions checks mount options against the node's options table:
// each must be a mount-scope option with a valid value. The error names
// the key.
func validateOptions(opts map[string]string) error {
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, err := mountOption(k)
		if err != nil {
			return err
		}
		s := node.Defaults()
		if err := o.Set(&s, opts[k]); err != nil {
			return fmt.Errorf("volume attribute %q: %w", k, err)
		}
	}
	return nil
}

// mountOption returns the row of the options table named k, which must be
// a mount-scope option; the error names the key.
func mountOption(k string) (node.Option, error) {
	for _, o := range node.Table() {
		if o.Name != k {
			continue
		}
		if o.Scope != node.ScopeMount {
			return o, fmt.Errorf("volume attribute %q: a node setting; set it on the mlfsd daemon, not per volume", k)
		}
		return o, nil
	}
	return node.Option{}, fmt.Errorf("volume attribute %q: unknown (want %q, %q, or a mount option such as upload-concurrency)", k, AttrURI, AttrMode)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// credentials reads the publish secrets, by the names of
// node.CredentialTable. Unknown keys are refused (a typo would otherwise
// silently fall back to the node's own credentials); the error names the
// key, never a value.
func credentials(secrets map[string]string) (node.Credentials, error) {
	if kt, ok := secrets["hdfs-keytab"]; ok {
		// A Secret holds the keytab file's bytes; the table carries it
		// base64-encoded.
		secrets = maps.Clone(secrets)
		secrets["hdfs-keytab"] = base64.StdEncoding.EncodeToString([]byte(kt))
	}
	c, err := node.CredentialsFromFields(secrets, false)
	if err != nil {
		return node.Credentials{}, fmt.Errorf("publish secrets: %w", err)
	}
	return c, nil
}

// podTokens reads the pod's service-account tokens kubelet puts in the
// volume context (TokensKey), by audience.
func podTokens(attrs map[string]string) (map[string]string, error) {
	raw, ok := attrs[TokensKey]
	if !ok || raw == "" {
		return nil, nil
	}
	var ts map[string]struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(raw), &ts); err != nil {
		// The value is secret: the error says where, not what.
		return nil, fmt.Errorf("volume context %q: not a JSON object of {\"token\": ...} by audience", TokensKey)
	}
	out := map[string]string{}
	for aud, t := range ts {
		out[aud] = t.Token
	}
	return out, nil
}

// withPodIdentity adds to c the roles the volume names, with the pod's
// token for each role's audience. A role without its token is an error
// saying what the CSIDriver object must ask for.
func withPodIdentity(c node.Credentials, spec volumeSpec, tokens map[string]string, ossAud, s3Aud string) (node.Credentials, error) {
	token := func(aud, attr string) (string, error) {
		t := tokens[aud]
		if t == "" {
			return "", fmt.Errorf("volume attribute %q names a role to assume with the pod's service-account token, but kubelet gave no token for audience %q in %q: add {audience: %s} to the tokenRequests of the CSIDriver object (and requiresRepublish: true)",
				attr, aud, TokensKey, aud)
		}
		return t, nil
	}
	if spec.ossRole != "" {
		if c.OSSAccessKeyID != "" || c.OSSRoleARN != "" {
			return c, fmt.Errorf("volume attribute %q: the publish secrets bring OSS credentials too; give one or the other", AttrOSSRoleARN)
		}
		t, err := token(ossAud, AttrOSSRoleARN)
		if err != nil {
			return c, err
		}
		c.OSSRoleARN, c.OSSOIDCProviderARN, c.OSSOIDCToken = spec.ossRole, spec.ossProvider, t
	}
	if spec.s3Role != "" {
		if c.S3AccessKeyID != "" || c.S3RoleARN != "" {
			return c, fmt.Errorf("volume attribute %q: the publish secrets bring S3 credentials too; give one or the other", AttrS3RoleARN)
		}
		t, err := token(s3Aud, AttrS3RoleARN)
		if err != nil {
			return c, err
		}
		c.S3RoleARN, c.S3WebIdentityToken = spec.s3Role, t
	}
	return c, c.Validate()
}

// Volume IDs of dynamically provisioned volumes are
// "mlfsd:<policy>:<mac>:<uri>": the volume's own prefix, what DeleteVolume
// does with its data, and a MAC of both under the controller's key. The
// controller keeps no state: the ID is all DeleteVolume gets, and anyone
// who can create a PersistentVolume can write one, so only the MAC proves
// that this controller made it. A controller without a key issues
// "mlfsd:retain:<uri>" (it never deletes). The "mlfsd:" prefix keeps a
// static PersistentVolume's handle from being taken for one.
const (
	policyRetain = "retain"
	policyDelete = "delete"
)

const idPrefix = "mlfsd:"

// volumeMAC is the MAC of a volume's policy and URI under key: 16 bytes
// of HMAC-SHA256, base64url (22 characters, no ':').
func volumeMAC(key []byte, policy string, u backends.URI) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mlfsd volume id\x00" + policy + "\x00" + u.String()))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// volumeID builds the ID of a provisioned volume, signed with key when
// there is one.
func volumeID(key []byte, policy string, u backends.URI) string {
	if key == nil {
		return idPrefix + policy + ":" + u.String()
	}
	return idPrefix + policy + ":" + volumeMAC(key, policy, u) + ":" + u.String()
}

// provisioned is a volume ID read back by parseVolumeID.
type provisioned struct {
	policy string
	mac    string // "" in an unsigned ID
	uri    backends.URI
}

// signedBy reports whether the ID carries a valid MAC under key.
func (p provisioned) signedBy(key []byte) bool {
	if key == nil || p.mac == "" {
		return false
	}
	return hmac.Equal([]byte(p.mac), []byte(volumeMAC(key, p.policy, p.uri)))
}

// parseVolumeID reads an ID made by volumeID, signed or not; ok is false
// for any other string (a static PersistentVolume's handle, a made-up ID).
// It does not check the MAC: see signedBy.
func parseVolumeID(id string) (p provisioned, ok bool) {
	rest, found := strings.CutPrefix(id, idPrefix)
	if !found {
		return p, false
	}
	p.policy, rest, found = strings.Cut(rest, ":")
	if !found || (p.policy != policyRetain && p.policy != policyDelete) {
		return p, false
	}
	// A MAC holds no ':' and a URI's scheme is followed by "://".
	if mac, after, found := strings.Cut(rest, ":"); found && !strings.HasPrefix(after, "//") {
		p.mac, rest = mac, after
	}
	u, err := backends.ParseURI(rest)
	if err != nil || !u.IsDir() {
		return provisioned{}, false
	}
	p.uri = u
	return p, true
}

// CheckAttributes validates a volume's attributes (uri, mode and mount
// options) as NodePublishVolume does, for tools and tests of manifests.
func CheckAttributes(attrs map[string]string) error {
	_, err := parseAttributes(attrs)
	return err
}
