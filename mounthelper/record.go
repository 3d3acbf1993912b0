package mounthelper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// Record is what the mount helper leaves for the umount helper. It
// holds no credentials.
type Record struct {
	Target string `json:"target"`
	URI    string `json:"uri"`
	PID    int    `json:"pid,omitempty"`    // the serving `mlfsd mount` process
	Daemon string `json:"daemon,omitempty"` // or the daemon's API socket
}

// RunDir is where mount records are kept ($MLFSD_MOUNT_RUN_DIR or
// /run/mlfsd/mounts).
func RunDir() string {
	if d := os.Getenv(RunDirEnv); d != "" {
		return d
	}
	return defaultRunDir
}

// RecordPath names the record of the mount at target.
func RecordPath(target string) string {
	esc := strings.ReplaceAll(strings.Trim(target, "/"), "-", "--")
	esc = strings.ReplaceAll(esc, "/", "-")
	if esc == "" {
		esc = "-"
	}
	return filepath.Join(RunDir(), esc+".json")
}

// WriteRecord keeps r for the umount helper (atomically, mode 0600).
func WriteRecord(r Record) error {
	if err := os.MkdirAll(RunDir(), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(RecordPath(r.Target), data, 0o600, atomicfile.NoSync)
}

// ReadRecord returns the record of the mount at target.
func ReadRecord(target string) (Record, error) {
	var r Record
	data, err := os.ReadFile(RecordPath(target))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

// RemoveRecord drops the record of the mount at target.
func RemoveRecord(target string) { os.Remove(RecordPath(target)) }
