package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/mlfsd/mlfsd/backends"
)

// ManifestName is the file, at the top of a prepared dataset, that describes
// it. It is written last, so its presence means the dataset is complete.
const ManifestName = "manifest.json"

// ManifestFormat names the manifest's format version.
const ManifestFormat = "mlfsd-bench/2"

// Profile sizes a dataset.
type Profile struct {
	Name        string `json:"name,omitempty"`
	Shards      int    `json:"shards"`        // large files, read sequentially and at random
	ShardSize   int64  `json:"shard_size"`    // bytes per shard
	SmallFiles  int    `json:"small_files"`   // files of the epoch workload
	SmallSize   int64  `json:"small_size"`    // mean size; each file is 75%..125% of it
	SmallPerDir int    `json:"small_per_dir"` // files per subdirectory, as in class-per-directory image sets
	MetaEntries int    `json:"meta_entries"`  // empty files in the one wide directory
}

// profiles are the named dataset sizes: "test" for unit tests, "medium" for
// a comparison that runs in minutes, "large" for real measurements.
func profiles() map[string]Profile {
	return map[string]Profile{
		"test":   {Name: "test", Shards: 2, ShardSize: 8 << 20, SmallFiles: 300, SmallSize: 16 << 10, SmallPerDir: 100, MetaEntries: 2000},
		"medium": {Name: "medium", Shards: 4, ShardSize: 64 << 20, SmallFiles: 1000, SmallSize: 100 << 10, SmallPerDir: 250, MetaEntries: 10000},
		"large":  {Name: "large", Shards: 4, ShardSize: 1 << 30, SmallFiles: 10000, SmallSize: 100 << 10, SmallPerDir: 1000, MetaEntries: 100000},
	}
}

// ProfileNames lists the named profiles, smallest first.
func ProfileNames() []string { return []string{"test", "medium", "large"} }

// LookupProfile returns the named profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles()[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown dataset profile %q: want one of %v", name, ProfileNames())
	}
	return p, nil
}

// Validate reports the first unusable size.
func (p Profile) Validate() error {
	switch {
	case p.Shards < 1:
		return fmt.Errorf("profile: shards %d: want at least 1", p.Shards)
	case p.ShardSize < 1<<20:
		return fmt.Errorf("profile: shard size %d: want at least 1 MiB", p.ShardSize)
	case p.SmallFiles < 1:
		return fmt.Errorf("profile: small files %d: want at least 1", p.SmallFiles)
	case p.SmallSize < 1:
		return fmt.Errorf("profile: small file size %d: want at least 1 byte", p.SmallSize)
	case p.SmallPerDir < 1:
		return fmt.Errorf("profile: small files per directory %d: want at least 1", p.SmallPerDir)
	case p.MetaEntries < 1:
		return fmt.Errorf("profile: metadata entries %d: want at least 1", p.MetaEntries)
	}
	return nil
}

// File is one data file of a dataset.
type File struct {
	Path  string `json:"path"` // slash-separated, relative to the dataset root
	Size  int64  `json:"size"`
	Seed  uint64 `json:"seed"`  // of its Content
	XXH64 string `json:"xxh64"` // of the whole file, hex
}

// Content returns the generator of the file's bytes.
func (f File) Content() Content { return Content{Seed: f.Seed} }

// Manifest describes a prepared dataset.
type Manifest struct {
	Format  string  `json:"format"`
	Seed    uint64  `json:"seed"`
	Profile Profile `json:"profile"`
	Shards  []File  `json:"shards"`
	Small   []File  `json:"small"`
	// MetaDir holds MetaEntries empty files named MetaName(i).
	MetaDir     string `json:"meta_dir"`
	MetaEntries int    `json:"meta_entries"`
}

// Dataset layout, relative to the dataset root.
const (
	shardDir = "shards"
	smallDir = "small"
	metaDir  = "meta"
)

// MetaName is the name of entry i of the metadata directory.
func MetaName(i int) string { return fmt.Sprintf("m%07d", i) }

// fileSeed derives a file's content seed from the dataset seed and its path,
// so that two files never share content.
func fileSeed(seed uint64, p string) uint64 {
	return mix(seed ^ xxhash.Sum64String(p))
}

// Plan returns the manifest of the dataset (profile, seed) without the
// checksums, which Prepare fills in as it writes.
func Plan(p Profile, seed uint64) (*Manifest, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &Manifest{Format: ManifestFormat, Seed: seed, Profile: p, MetaDir: metaDir, MetaEntries: p.MetaEntries}
	for i := range p.Shards {
		fp := path.Join(shardDir, fmt.Sprintf("shard-%04d.bin", i))
		m.Shards = append(m.Shards, File{Path: fp, Size: p.ShardSize, Seed: fileSeed(seed, fp)})
	}
	for i := range p.SmallFiles {
		fp := path.Join(smallDir, fmt.Sprintf("d%04d", i/p.SmallPerDir), fmt.Sprintf("f%07d.bin", i))
		s := fileSeed(seed, fp)
		// 75%..125% of the mean, so sizes are not all block multiples.
		size := p.SmallSize*3/4 + int64(s%uint64(p.SmallSize/2+1))
		m.Small = append(m.Small, File{Path: fp, Size: max(size, 1), Seed: s})
	}
	return m, nil
}

// LoadManifest reads the manifest at the top of the dataset directory root.
func LoadManifest(root string) (*Manifest, error) {
	return LoadManifestFS(context.Background(), DirFS(root))
}

// LoadManifestFS reads the manifest at the top of fsys.
func LoadManifestFS(ctx context.Context, fsys FS) (*Manifest, error) {
	where := strings.TrimSuffix(fsys.String(), "/") + "/" + ManifestName
	b, err := readAll(ctx, fsys, ManifestName)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, backends.ErrNotExist) {
			return nil, fmt.Errorf("%s has no %s: prepare the dataset with `mlfsd bench prepare DIR` and mount DIR", fsys, ManifestName)
		}
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", where, m.Format, ManifestFormat)
	}
	// The manifest is an input we read through the mount under test: refuse
	// one that disagrees with the seed, or later checks would be meaningless.
	want, err := Plan(m.Profile, m.Seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(want.Shards) != len(m.Shards) || len(want.Small) != len(m.Small) || m.MetaEntries != want.MetaEntries || m.MetaDir != want.MetaDir {
		return nil, fmt.Errorf("%s: file lists do not match its profile", where)
	}
	got := append(append([]File(nil), m.Shards...), m.Small...)
	exp := append(append([]File(nil), want.Shards...), want.Small...)
	for i, f := range got {
		w := exp[i]
		if f.Path != w.Path || f.Size != w.Size || f.Seed != w.Seed {
			return nil, fmt.Errorf("%s: entry %s does not match seed %d", where, f.Path, m.Seed)
		}
		if _, err := strconv.ParseUint(f.XXH64, 16, 64); err != nil {
			return nil, fmt.Errorf("%s: entry %s: bad checksum %q", where, f.Path, f.XXH64)
		}
	}
	return &m, nil
}

func readAll(ctx context.Context, fsys FS, name string) ([]byte, error) {
	f, err := fsys.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TotalBytes is the size of all data files.
func (m *Manifest) TotalBytes() int64 {
	var n int64
	for _, f := range m.Shards {
		n += f.Size
	}
	for _, f := range m.Small {
		n += f.Size
	}
	return n
}
