package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/s3"
)

// s3OutputStore runs `mlfsd emulate oss` in a subprocess and names its S3
// face as the output store (s3://bkt/out/?endpoint=...), reading it back
// through the s3 backend.
func s3OutputStore(t *testing.T) store {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "bkt"), 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// The emulator takes the OSS pair; mlfsd signs S3 with the same one.
	t.Setenv("OSS_ACCESS_KEY_ID", "test-id")
	t.Setenv("OSS_ACCESS_KEY_SECRET", "test-secret")
	t.Setenv("AWS_ACCESS_KEY_ID", "test-id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	for _, k := range []string{"OSS_SESSION_TOKEN", "OSS_ENDPOINT", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	emu := mlfsdCmd(t, "emulate", "oss", "--root", root, "--listen", addr)
	emuReady := withReadyFile(t, emu)
	emuErr := &syncBuffer{}
	emu.Stderr = emuErr
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	emuDone := make(chan error, 1)
	go func() { emuDone <- emu.Wait() }()
	t.Cleanup(func() { emu.Process.Kill(); <-emuDone })
	if got := waitReady(t, emuReady, emuDone, emuErr).Addr; got != addr {
		t.Fatalf("emulator serves %s, want %s", got, addr)
	}
	uri := "s3://bkt/out/?endpoint=http://" + addr
	u, _ := backends.ParseURI(uri)
	b, err := s3.New(context.Background(), u, s3.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return store{
		uri: uri,
		get: func(name string) ([]byte, bool) {
			r, err := b.Read(context.Background(), name, backends.ReadOptions{Length: -1})
			if err != nil {
				return nil, false
			}
			defer r.Close()
			data, err := io.ReadAll(r)
			return data, err == nil
		},
		size: func(name string) (int64, bool) {
			info, err := b.Stat(context.Background(), name)
			return info.Size, err == nil
		},
	}
}

// TestOutputOnS3SurvivesSIGKILL: an output channel on s3:// (the
// emulator's S3 face; multipart uploads streaming before close) keeps the
// guarantees of TestOutputSurvivesSIGKILL: every closed file lands whole
// after the daemon is killed mid-upload and restarted, nothing partial
// ever appears under a final name.
func TestOutputOnS3SurvivesSIGKILL(t *testing.T) { survivesSIGKILL(t, s3OutputStore(t)) }
