package csidriver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
)

// Modes of a volume.
const (
	ModeInput  = "input"
	ModeOutput = "output"
)

// Keys of the publish secrets (a Secret named by nodePublishSecretRef, or
// by the provisioner/deleter secret parameters of a StorageClass).
const (
	SecretOSSAccessKeyID     = "oss-access-key-id"
	SecretOSSAccessKeySecret = "oss-access-key-secret"
	SecretOSSSecurityToken   = "oss-security-token"
	SecretHDFSUser           = "hdfs-user"
)

// volumeSpec is a volume's attributes, parsed and validated.
type volumeSpec struct {
	uri     backends.URI
	output  bool
	options map[string]string // mount options by table name (validated)
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
		}
		s.options[k] = attrs[k]
	}
	if err := validateOptions(s.options); err != nil {
		return s, err
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

// credentials reads the publish secrets. Unknown keys are refused (a typo
// would otherwise silently fall back to the node's own credentials); the
// error names the key, never a value.
func credentials(secrets map[string]string) (node.Credentials, error) {
	var c node.Credentials
	for k, v := range secrets {
		switch k {
		case SecretOSSAccessKeyID:
			c.OSSAccessKeyID = v
		case SecretOSSAccessKeySecret:
			c.OSSAccessKeySecret = v
		case SecretOSSSecurityToken:
			c.OSSSecurityToken = v
		case SecretHDFSUser:
			c.HDFSUser = v
		default:
			return node.Credentials{}, fmt.Errorf("secret key %q: unknown (want %s, %s, %s or %s)", k,
				SecretOSSAccessKeyID, SecretOSSAccessKeySecret, SecretOSSSecurityToken, SecretHDFSUser)
		}
	}
	if (c.OSSAccessKeyID == "") != (c.OSSAccessKeySecret == "") {
		return node.Credentials{}, fmt.Errorf("secrets %s and %s go together: one is missing", SecretOSSAccessKeyID, SecretOSSAccessKeySecret)
	}
	if c.OSSSecurityToken != "" && c.OSSAccessKeyID == "" {
		return node.Credentials{}, fmt.Errorf("secret %s needs %s and %s", SecretOSSSecurityToken, SecretOSSAccessKeyID, SecretOSSAccessKeySecret)
	}
	return c, nil
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
