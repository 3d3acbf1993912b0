// Package api is the local API of an mlfsd node daemon: net/http with JSON
// bodies over a unix socket that only root may use (mode 0600, and every
// connection's SO_PEERCRED uid checked). Credentials travel in request
// bodies only; the server never logs a body.
//
// Endpoints (all JSON):
//
//	POST /v1/mount    MountRequest   -> node.MountInfo
//	POST /v1/unmount  UnmountRequest -> {}
//	POST /v1/drain    UnmountRequest -> {}
//	GET  /v1/mounts                  -> []node.MountInfo
//	GET  /v1/status                  -> []node.MountStatus
//
// An error is a non-2xx status with {"error": "..."}. A request refused or
// cut because the daemon is handing its mounts over to a new daemon
// (node.ErrHandingOver: nothing was unmounted) is a 503 with
// {"code": "handing_over"}; the Client sends it again to the new daemon.
package api

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"os"

	"github.com/mlfsd/mlfsd/node"
)

// MountRequest is the body of POST /v1/mount.
type MountRequest struct {
	URI         string            `json:"uri"`
	Target      string            `json:"target"`
	ReadOnly    bool              `json:"read_only"`
	Options     map[string]string `json:"options,omitempty"`
	Credentials *Credentials      `json:"credentials,omitempty"`
}

// Credentials are node.Credentials on the wire. This type exists only in
// request bodies; node.Credentials redacts itself everywhere else.
type Credentials struct {
	OSSAccessKeyID     string `json:"oss_access_key_id,omitempty"`
	OSSAccessKeySecret string `json:"oss_access_key_secret,omitempty"`
	OSSSecurityToken   string `json:"oss_security_token,omitempty"`
	HDFSUser           string `json:"hdfs_user,omitempty"`
	HDFSPrincipal      string `json:"hdfs_principal,omitempty"`
	// HDFSKeytab is the keytab's bytes (base64 in JSON).
	HDFSKeytab []byte `json:"hdfs_keytab,omitempty"`
}

// String keeps the wire type from printing its secret, too.
func (c Credentials) String() string { return c.node().String() }

// GoString redacts %#v.
func (c Credentials) GoString() string { return c.node().String() }

func (c Credentials) node() node.Credentials {
	return node.Credentials{OSSAccessKeyID: c.OSSAccessKeyID, OSSAccessKeySecret: c.OSSAccessKeySecret,
		OSSSecurityToken: c.OSSSecurityToken, HDFSUser: c.HDFSUser,
		HDFSPrincipal: c.HDFSPrincipal, HDFSKeytab: encodeKeytab(c.HDFSKeytab)}
}

func encodeKeytab(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(b)
}

func wireCredentials(c node.Credentials) *Credentials {
	if c.IsZero() {
		return nil
	}
	kt, _ := base64.StdEncoding.DecodeString(c.HDFSKeytab) // node.Credentials holds it encoded
	return &Credentials{OSSAccessKeyID: c.OSSAccessKeyID, OSSAccessKeySecret: c.OSSAccessKeySecret,
		OSSSecurityToken: c.OSSSecurityToken, HDFSUser: c.HDFSUser, HDFSPrincipal: c.HDFSPrincipal, HDFSKeytab: kt}
}

// UnmountRequest is the body of POST /v1/unmount and /v1/drain.
type UnmountRequest struct {
	Target string `json:"target"`
	// NoDrain unmounts without draining (what is not uploaded stays
	// journaled for the next mount of the channel).
	NoDrain bool `json:"no_drain,omitempty"`
}

// errorBody is the body of every error reply.
type errorBody struct {
	Error string `json:"error"`
	// Code names a condition a client acts on: codeHandingOver.
	Code string `json:"code,omitempty"`
}

// codeHandingOver marks an error reply of node.ErrHandingOver.
const codeHandingOver = "handing_over"

// TakeoverMarker is the file a daemon that handed its mounts over leaves
// beside its API socket (SOCKET.takeover) until the new daemon listens:
// a client that finds nobody listening while it is there (and not older
// than its TakeoverWait) waits for the new daemon instead of failing.
func TakeoverMarker(socket string) string { return socket + ".takeover" }

// MarkTakeover writes socket's TakeoverMarker (the old daemon, before it
// stops listening).
func MarkTakeover(socket string) error {
	return os.WriteFile(TakeoverMarker(socket), nil, 0o600)
}

// ClearTakeover removes socket's TakeoverMarker (a daemon once it listens).
func ClearTakeover(socket string) error {
	if err := os.Remove(TakeoverMarker(socket)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
