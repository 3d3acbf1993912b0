package csidriver

import (
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
	// SecretHDFSPrincipal and SecretHDFSKeytab log in to a Kerberized
	// HDFS cluster: the principal (user@REALM) and its keytab file's bytes.
	SecretHDFSPrincipal = "hdfs-principal"
	SecretHDFSKeytab    = "hdfs-keytab"
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
		case SecretHDFSPrincipal:
			c.HDFSPrincipal = v
		case SecretHDFSKeytab:
			c.HDFSKeytab = base64.StdEncoding.EncodeToString([]byte(v))
		default:
			return node.Credentials{}, fmt.Errorf("secret key %q: unknown (want %s, %s, %s, %s, %s or %s)", k,
				SecretOSSAccessKeyID, SecretOSSAccessKeySecret, SecretOSSSecurityToken, SecretHDFSUser, SecretHDFSPrincipal, SecretHDFSKeytab)
		}
	}
	if (c.HDFSKeytab == "") != (c.HDFSPrincipal == "") {
		return node.Credentials{}, fmt.Errorf("secrets %s and %s go together: one is missing", SecretHDFSPrincipal, SecretHDFSKeytab)
	}
	if (c.OSSAccessKeyID == "") != (c.OSSAccessKeySecret == "") {
		return node.Credentials{}, fmt.Errorf("secrets %s and %s go together: one is missing", SecretOSSAccessKeyID, SecretOSSAccessKeySecret)
	}
	if c.OSSSecurityToken != "" && c.OSSAccessKeyID == "" {
		return node.Credentials{}, fmt.Errorf("secret %s needs %s and %s", SecretOSSSecurityToken, SecretOSSAccessKeyID, SecretOSSAccessKeySecret)
	}
	return c, nil
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
