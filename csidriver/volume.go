package csidriver

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/mlfsd/mlfsd/backends"
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
		}
		s.options[k] = attrs[k]
	}
	if err := validateOptions(s.options); err != nil {
		return s, err
	}
	if (s.ossRole == "") != (s.ossProvider == "") {
		return s, fmt.Errorf("volume attributes %q and %q go together (RRSA): one is missing", AttrOSSRoleARN, AttrOSSOIDCProviderARN)
	}
	return s, nil
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
	known := map[string]node.Option{}
	for _, o := range node.Table() {
		known[o.Name] = o
	}
	for _, k := range keys {
		o, ok := known[k]
		if !ok {
			return fmt.Errorf("volume attribute %q: unknown (want %q, %q, or a mount option such as upload-concurrency)", k, AttrURI, AttrMode)
		}
		if o.Scope != node.ScopeMount {
			return fmt.Errorf("volume attribute %q: a node setting; set it on the mlfsd daemon, not per volume", k)
		}
		s := node.Defaults()
		if err := o.Set(&s, opts[k]); err != nil {
			return fmt.Errorf("volume attribute %q: %w", k, err)
		}
	}
	return nil
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

// Volume IDs of dynamically provisioned volumes are "mlfsd:<policy>:<uri>":
// the volume's own prefix and what DeleteVolume does with its data. The
// controller keeps no state: the ID is all DeleteVolume gets. The "mlfsd:"
// prefix keeps a static PersistentVolume's handle from being taken for one.
const (
	policyRetain = "retain"
	policyDelete = "delete"
)

// volumeID builds the ID of a provisioned volume.
func volumeID(policy string, u backends.URI) string { return idPrefix + policy + ":" + u.String() }

const idPrefix = "mlfsd:"

// parseVolumeID reads an ID made by volumeID. ok is false for any other
// string (a static PersistentVolume's handle, a made-up ID).
func parseVolumeID(id string) (policy string, u backends.URI, ok bool) {
	rest, found := strings.CutPrefix(id, idPrefix)
	if !found {
		return "", backends.URI{}, false
	}
	policy, rest, found = strings.Cut(rest, ":")
	if !found || (policy != policyRetain && policy != policyDelete) {
		return "", backends.URI{}, false
	}
	u, err := backends.ParseURI(rest)
	if err != nil || !u.IsDir() {
		return "", backends.URI{}, false
	}
	return policy, u, true
}

// CheckAttributes validates a volume's attributes (uri, mode and mount
// options) as NodePublishVolume does, for tools and tests of manifests.
func CheckAttributes(attrs map[string]string) error {
	_, err := parseAttributes(attrs)
	return err
}
