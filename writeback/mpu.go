package writeback

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mlfsd/mlfsd/backends"
)

// Multipart uploads hold storage in the store until they are committed or
// aborted; a daemon killed during one would leave it there for good. Each
// upload a backend starts (WriteOptions.OnUpload) is recorded under
// uploads/ before its first part is sent, and forgotten once committed or
// aborted; the next Store on the staging dir aborts what is left.

// uploadRecord is uploads/<hash of the upload ID>.json.
type uploadRecord struct {
	Key      string `json:"key"`
	UploadID string `json:"upload_id"`
}

func (s *Store) uploadsDir() string { return filepath.Join(s.dir, "uploads") }

// trackUploads returns the OnUpload callback for one write of key, and
// forget, which drops its records (call it once the write is committed or
// successfully aborted).
func (s *Store) trackUploads(key string) (onUpload func(string), forget func()) {
	var mu sync.Mutex
	var recs []string
	onUpload = func(id string) {
		j := journal{dir: s.uploadsDir(), sync: s.jr.sync}
		r := uploadRecord{Key: key, UploadID: id}
		data, err := json.Marshal(r)
		if err == nil {
			err = j.putRaw(keyOf(id), data)
		}
		if err != nil {
			s.log.Warn("writeback: cannot record a multipart upload; a crash would leave it open in the store", "key", key, "upload", id, "err", err)
			return
		}
		mu.Lock()
		recs = append(recs, j.path(keyOf(id)))
		mu.Unlock()
	}
	forget = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range recs {
			os.Remove(p)
		}
		recs = nil
	}
	return onUpload, forget
}

// leftUploads reads the uploads a previous run left open.
func (s *Store) leftUploads() []uploadRecord {
	des, err := os.ReadDir(s.uploadsDir())
	if err != nil {
		return nil
	}
	var out []uploadRecord
	for _, de := range des {
		p := filepath.Join(s.uploadsDir(), de.Name())
		if filepath.Ext(de.Name()) != ".json" {
			os.Remove(p) // a record never renamed into place
			continue
		}
		data, err := os.ReadFile(p)
		var r uploadRecord
		if err != nil || json.Unmarshal(data, &r) != nil || r.UploadID == "" {
			s.log.Warn("writeback: unreadable multipart upload record; removed", "record", p)
			os.Remove(p)
			continue
		}
		out = append(out, r)
	}
	return out
}

// abortLeftUploads aborts the uploads of recs in the background: a store
// that is slow or down must not hold up the start. Records stay for the
// next start when an abort fails.
func (s *Store) abortLeftUploads(recs []uploadRecord) {
	if len(recs) == 0 {
		return
	}
	a, ok := backends.As[backends.UploadAborter](s.b)
	if !ok {
		for _, r := range recs {
			os.Remove(filepath.Join(s.uploadsDir(), keyOf(r.UploadID)+".json"))
		}
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		aborted := 0
		for _, r := range recs {
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			err := a.AbortUpload(ctx, r.Key, r.UploadID)
			cancel()
			if err != nil {
				s.log.Warn("writeback: cannot abort a multipart upload left by a crash; trying again at the next start", "key", r.Key, "upload", r.UploadID, "err", err)
				continue
			}
			os.Remove(filepath.Join(s.uploadsDir(), keyOf(r.UploadID)+".json"))
			aborted++
		}
		if aborted > 0 {
			s.log.Info("writeback: aborted multipart uploads left by a previous run", "uploads", aborted)
		}
	}()
}
