package writeback

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mlfsd/mlfsd/backends"
)

// A channel's staging sub-directory is named after what names its data,
// not how it is reached: restarting after a crash with another endpoint
// (an internal instead of a public OSS endpoint, an HDFS nameservice
// instead of one of its NameNodes) must find the pending uploads. What
// counts as the same store is backends' business (backends.DataIdentity,
// backends.SameStore); a sub-directory of the same store under another key
// is adopted at start (adoptLegacy).

// DataIdentifier is implemented by backends that know a better name for
// their data than the address in their ID.
type DataIdentifier = backends.DataIdentifier

// dataIdentity names the data b serves, independent of its endpoint.
func dataIdentity(b backends.Backend) string { return backends.DataIdentity(b) }

// identityOfID derives a data identity from a backend ID (a channel URI).
func identityOfID(id string) string { return backends.IdentityOfID(id) }

// stagingKey names a backend's sub-directory of the staging dir.
func stagingKey(b backends.Backend) string { return keyOf(dataIdentity(b)) }

func keyOf(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:8])
}

// Files a Store writes in its sub-directory for people and later runs.
const (
	identityFile = "IDENTITY" // the data identity the directory is keyed by
	backendFile  = "BACKEND"  // the backend ID (address) last used
	lockFile     = "lock"     // flocked while open; holds the holder's pid
)

// lockStaging takes the staging sub-directory's lock, or says who holds it.
func (s *Store) lockStaging() (*os.File, error) {
	p := filepath.Join(s.dir, lockFile)
	lock, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("staging dir %s: %w", s.opt.StagingDir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("staging dir %s: lock %s: %w", s.opt.StagingDir, p, err)
		}
		by := "another mlfsd"
		if data, rerr := os.ReadFile(p); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil && pid > 0 {
				if pid == os.Getpid() {
					by = fmt.Sprintf("this mlfsd (pid %d): two outputs on one URI?", pid)
				} else {
					by = fmt.Sprintf("mlfsd pid %d", pid)
				}
			}
		}
		return nil, fmt.Errorf("output channel %s is already mounted, by %s (its staging area %s is locked)", s.b.ID(), by, s.dir)
	}
	if err := lock.Truncate(0); err == nil {
		lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return lock, nil
}

// adoptLegacy moves the journal and staged data of sub-directories of the
// staging dir that hold this Store's data under another name (keyed by an
// endpoint address, as earlier versions did, or reached through another
// endpoint) into s.dir, and reports pending records of other channels.
// Runs before recovery, holding s.dir's lock.
func (s *Store) adoptLegacy(identity string) {
	des, err := os.ReadDir(s.opt.StagingDir)
	if err != nil {
		return
	}
	for _, de := range des {
		dir := filepath.Join(s.opt.StagingDir, de.Name())
		if !de.IsDir() || dir == s.dir {
			continue
		}
		recs, _ := filepath.Glob(filepath.Join(dir, "journal", "*.json"))
		if len(recs) == 0 {
			continue
		}
		id := readLine(filepath.Join(dir, identityFile))
		if id == "" {
			id = identityOfID(readLine(filepath.Join(dir, backendFile)))
		}
		if !backends.SameStore(id, identity) {
			s.log.Warn("writeback: the staging dir holds closed files of another output channel, not uploaded; mount that channel to upload them",
				"channel", orUnknown(readLine(filepath.Join(dir, backendFile))), "files", len(recs), "dir", dir)
			continue
		}
		s.adoptDir(dir)
	}
}

func (s *Store) adoptDir(dir string) {
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		s.log.Warn("writeback: closed files of this channel are staged under another address, in use by another mlfsd", "dir", dir)
		return
	}
	jr := journal{dir: filepath.Join(dir, "journal")}
	rs, _, err := jr.load() // unreadable records stay where they are, for a look
	if err != nil {
		s.log.Warn("writeback: cannot read staged records to adopt", "dir", dir, "err", err)
		return
	}
	moved := 0
	for _, r := range rs {
		from, to := filepath.Join(dir, "blobs", r.Blob), filepath.Join(s.blobDir, r.Blob)
		before, berr := ctimeOf(from)
		if err := os.Rename(from, to); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("writeback: cannot adopt staged data", "key", r.Key, "err", err)
			continue
		}
		// A rename changes the change time: carry "unchanged since the
		// seal" over to the moved blob (and "changed" stays changed).
		if after, err := ctimeOf(to); berr == nil && err == nil && r.CTime == before {
			r.CTime = after
		}
		if err := s.jr.put(r, false); err != nil {
			s.log.Warn("writeback: cannot adopt a journal record", "key", r.Key, "err", err)
			continue
		}
		jr.remove(r.ID)
		moved++
	}
	s.log.Info("writeback: adopted closed files staged for this channel under another endpoint", "files", moved, "from", dir)
}

func readLine(p string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

func ctimeOf(p string) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return 0, err
	}
	return st.Ctim.Nano(), nil
}
