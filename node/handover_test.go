package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/nas"
	"github.com/mlfsd/mlfsd/cache"
)

// TestHandoverMountCarriesCredentials: a mount made with a client's keys
// keeps them across the handover socket (the new daemon must reach the
// store as the client did), while formatting and logging still redact.
func TestHandoverMountCarriesCredentials(t *testing.T) {
	c := Credentials{OSSAccessKeyID: "id", OSSAccessKeySecret: "s3cret", OSSSecurityToken: "t0ken", HDFSUser: "u",
		HDFSPrincipal: "u@R", HDFSKeytab: "BQIAAABrM3l0YWI="}
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
		if strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") || strings.Contains(s, c.HDFSKeytab) {
			t.Errorf("secret leaked: %s", s)
		}
	}
}

// TestLateSourceMovesToTheCache: a file opened before the cache is open
// (right after a takeover) is read from its store, and from the cache once
// the cache is there, with the same bytes throughout.
func TestLateSourceMovesToTheCache(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := backends.ParseURI("nas://" + dir + "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := nas.New(ctx, u, nas.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	info, err := b.Stat(ctx, "f.bin")
	if err != nil {
		t.Fatal(err)
	}
	src := &lateSource{}
	h, err := src.Open(ctx, b, info)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	read := func(off int64) {
		t.Helper()
		buf := make([]byte, 4096)
		n, err := h.ReadAt(ctx, buf, off)
		if err != nil || !bytes.Equal(buf[:n], data[off:off+int64(n)]) || n != len(buf) {
			t.Fatalf("read at %d: %d bytes, %v", off, n, err)
		}
	}
	read(0)
	c, err := cache.New(cache.Options{Dir: t.TempDir(), MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v := c.View()
	src.v.Store(v)
	read(8192)
	if got := v.Stats().BytesServed; got == 0 {
		t.Errorf("the read after the cache opened did not go through it")
	}
}
