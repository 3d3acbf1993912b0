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
// An error is a non-2xx status with {"error": "...", "code": "..."}; the
// code names the node error it is of (not_mounted, target_busy,
// not_allowed, closed), and the client's Error matches that error with
// errors.Is. A request refused or
// cut because the daemon is handing its mounts over to a new daemon
// (node.ErrHandingOver: nothing was unmounted) is a 503 with
// {"code": "handing_over"}; the Client sends it again to the new daemon.
package api

import (
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

// Credentials are node.Credentials on the wire: every row of
// node.CredentialTable by its WireName (oss_access_key_id, s3_role_arn,
// s3_web_identity_token, ...), secrets included. This type exists only in
// request bodies; formatted or logged it redacts itself, and the server
// never logs a body.
type Credentials = node.SecretCredentials

func wireCredentials(c node.Credentials) *Credentials {
	if c.IsZero() {
		return nil
	}
	return &Credentials{Credentials: c}
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

// Codes of error replies: each names the node sentinel error the reply is
// of, so that a client's Error matches it with errors.Is (Error.Is).
const (
	codeHandingOver = "handing_over" // node.ErrHandingOver
	codeNotMounted  = "not_mounted"  // node.ErrNotMounted
	codeTargetBusy  = "target_busy"  // node.ErrTargetBusy
	codeNotAllowed  = "not_allowed"  // nasroots.ErrNotAllowed
	codeClosed      = "closed"       // node.ErrClosed
)

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
