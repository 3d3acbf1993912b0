package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestHandoverMountCarriesCredentials: a mount made with a client's keys
// keeps them across the handover socket (the new daemon must reach the
// store as the client did), while formatting and logging still redact.
func TestHandoverMountCarriesCredentials(t *testing.T) {
	c := Credentials{OSSAccessKeyID: "id", OSSAccessKeySecret: "s3cret", OSSSecurityToken: "t0ken", HDFSUser: "u"}
	hm := HandoverMount{Request: MountRequest{URI: "oss://b/p/", Target: "/mnt/x", ReadOnly: true, Credentials: c},
		Credentials: HandoverCredentials(c)}
	data, err := json.Marshal(hm)
	if err != nil {
		t.Fatal(err)
	}
	var back HandoverMount
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Credentials.creds() != c {
		t.Errorf("credentials after the wire: %#v", back.Credentials)
	}
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("m", "creds", hm.Credentials)
	for _, s := range []string{fmt.Sprint(hm.Credentials), fmt.Sprintf("%#v", hm.Credentials), sb.String()} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") {
			t.Errorf("secret leaked: %s", s)
		}
	}
}
