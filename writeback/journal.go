package writeback

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/internal/atomicfile"
)

// The journal is one small JSON file per entry with a closed, not yet
// durable version: journal/<entry id>.json. A record is written (temp file,
// rename) before close returns, and removed
// once that version, or a later one, is durable in the backend. A blob a
// record names is sealed: it never changes again. On restart every record
// is uploaded again; blobs no record names are discarded, so bytes of a
// file whose close never returned are never published.

// record is what the journal holds for one entry.
type record struct {
	ID   string `json:"id"`
	Key  string `json:"key"`
	Blob string `json:"blob"` // file name under blobs/
	Size int64  `json:"size"`
	// Seq orders records written for the same key (nanoseconds at seal):
	// if a crash ever leaves two, the later one wins.
	Seq     int64 `json:"seq"`
	ModTime int64 `json:"mtime"` // unix nanoseconds
	// CTime is the blob's change time at seal: a blob that changed since
	// (written through a descriptor still open) is never published.
	CTime int64 `json:"ctime,omitempty"`
}

type journal struct {
	dir string
	// sync fsyncs records and the directory, for records that survive a
	// machine crash. A daemon crash (SIGKILL) needs no fsync: the page
	// cache outlives the process, and rename is atomic. It is set with
	// Options.StagingSync, since a durable record of data that is not
	// durable itself would be of no use.
	sync bool
}

func (j *journal) path(id string) string { return filepath.Join(j.dir, id+".json") }

// put replaces the record of r.ID atomically; durably (fsync) if j.sync
// or sync is set.
func (j *journal) put(r record, sync bool) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return stagingErr("journal", r.Key, atomicfile.Write(j.path(r.ID), data, 0o600, j.durability(sync)))
}

// durability is how a record is written: durably if j.sync or sync is set.
func (j *journal) durability(sync bool) atomicfile.Sync {
	if sync || j.sync {
		return atomicfile.Durable
	}
	return atomicfile.NoSync
}

// putRaw writes data as the record name, atomically (temp file, rename).
func (j *journal) putRaw(name string, data []byte) error {
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(j.path(name), data, 0o600, j.durability(false))
}

// remove deletes the record of id; a missing record is not an error.
func (j *journal) remove(id string) error {
	if err := os.Remove(j.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !j.sync {
		return nil
	}
	return atomicfile.SyncDir(j.dir)
}

// badRecord is a journal file that cannot be read as a record.
type badRecord struct {
	name string
	err  error
}

// load reads every record. Unreadable records are returned apart, never
// skipped silently (they may name a file someone closed): the Store sets
// them aside and reports them.
func (j *journal) load() ([]record, []badRecord, error) {
	des, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, nil, err
	}
	var out []record
	var bad []badRecord
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") {
			// A record never renamed into place: atomicfile's temporary
			// names, and the .<id>.tmp of older daemons.
			os.Remove(filepath.Join(j.dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(j.dir, name))
		if err != nil {
			bad = append(bad, badRecord{name, err})
			continue
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			bad = append(bad, badRecord{name, fmt.Errorf("journal record %s is corrupt: %w", name, err)})
			continue
		}
		if r.ID+".json" != name || r.Blob == "" {
			bad = append(bad, badRecord{name, fmt.Errorf("journal record %s is inconsistent (id %q, blob %q)", name, r.ID, r.Blob)})
			continue
		}
		out = append(out, r)
	}
	return out, bad, nil
}

// stagingErr turns a local staging-disk error into a backends error the
// FUSE edge maps: a full disk becomes ENOSPC for the writer.
func stagingErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return backends.Wrap(op, key, backends.ErrNoSpace, err)
	}
	return &backends.OpError{Op: op, Key: key, Err: err}
}
