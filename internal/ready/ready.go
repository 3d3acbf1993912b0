// Package ready is how a long-running mlfsd process (the daemon, a
// foreground mount, an emulator) tells whoever started it that it serves:
// a file written atomically once it does, naming the addresses it serves
// on (Write), and, for the daemon, sd_notify READY=1 when systemd asked
// for it (Notify). Tests, systemd and Kubernetes probes wait on these,
// never on log lines, whose wording is free to change.
package ready

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
	"github.com/mlfsd/mlfsd/internal/sdnotify"
)

// Info is the content of a ready file (JSON). Fields a process does not
// serve are left out.
type Info struct {
	// PID is the process that wrote the file: after a takeover the new
	// daemon writes it again, so a reader can tell the two apart.
	PID int `json:"pid"`
	// Socket is the daemon's API socket.
	Socket string `json:"socket,omitempty"`
	// Metrics is the address /metrics and /healthz are served on
	// (--metrics-listen, with the port the kernel picked for port 0).
	Metrics string `json:"metrics,omitempty"`
	// Mountpoint is a foreground mount's mountpoint, mounted and served.
	Mountpoint string `json:"mountpoint,omitempty"`
	// Addr is an emulator's address (the OSS endpoint, the NameNode).
	Addr string `json:"addr,omitempty"`
	// MetadataAddr is the OSS emulator's metadata endpoint, if served.
	MetadataAddr string `json:"metadata_addr,omitempty"`
	// DataNodeAddr is the HDFS emulator's DataNode.
	DataNodeAddr string `json:"datanode_addr,omitempty"`
}

// Write says the process serves: it writes info (with this PID) to path,
// or does nothing if path is empty. The file is written to a temporary
// name and renamed, so a reader sees all of it or none; it is not removed
// at exit (a taken-over daemon's successor writes it again).
func Write(path string, info Info) error {
	if path == "" {
		return nil
	}
	info.PID = os.Getpid()
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("ready file %s: %w", path, err)
	}
	return nil
}

// Check refuses, before a process starts serving, a ready file path whose
// directory does not exist: whoever waits for that file would wait for
// ever. An empty path is fine (no file asked for).
func Check(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(filepath.Dir(path))
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return fmt.Errorf("--ready-file %s: its directory: %w; create it first", path, err)
	}
	return nil
}

// writeAtomic writes b to path through a temporary file in its directory.
// No fsync: the file describes a running process, so it means nothing
// after a crash of the machine.
func writeAtomic(path string, b []byte) error {
	return atomicfile.Write(path, b, 0o644, atomicfile.NoSync)
}

// ErrNotReady is what Read returns while no ready file exists.
var ErrNotReady = errors.New("not ready yet: no ready file")

// Read returns the Info in the ready file at path, or an error wrapping
// ErrNotReady while there is none.
func Read(path string) (Info, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, fmt.Errorf("%s: %w", path, ErrNotReady)
	}
	if err != nil {
		return Info{}, err
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("ready file %s: %w", path, err)
	}
	return info, nil
}

// Notify sends a state ("READY=1", "STOPPING=1", "MAINPID=N") to systemd
// over $NOTIFY_SOCKET (the sd_notify protocol: one datagram); without
// that variable it does nothing. Only the daemon notifies: a foreground
// mount may be the child of a process whose unit gave it $NOTIFY_SOCKET
// (the mount helper passes its environment on), and a READY=1 from it
// would speak for that unit.
func Notify(state string) error {
	return sdnotify.Notify(state)
}
