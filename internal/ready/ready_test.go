package ready

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteWritesWhatReadReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready.json")
	if _, err := Read(path); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Read before Write: %v, want ErrNotReady", err)
	}
	want := Info{Socket: "/run/mlfsd.sock", Metrics: "127.0.0.1:9469"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want.PID = os.Getpid()
	if got != want {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory after Write: %v, %v; want the ready file alone (no temporary left)", entries, err)
	}
}

func TestWriteRefusesUnwritablePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "ready.json")
	if err := Check(path); err == nil || !strings.Contains(err.Error(), "missing-dir") {
		t.Fatalf("Check of a path in a missing directory: %v, want an error naming it", err)
	}
	if err := Write(path, Info{}); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
	if err := Check(""); err != nil {
		t.Fatalf("Check of no path: %v", err)
	}
}

func TestNotifySystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	// The manager reads as the message comes: Notify waits until it has
	// read it (the barrier message that follows, whose fd a read without
	// room for it closes).
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := l.Read(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
		l.Read(buf) // BARRIER=1
	}()
	if err := Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != "READY=1" {
		t.Fatalf("systemd got %q; want READY=1", m)
	}
}
