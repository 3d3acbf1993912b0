// Package backends defines the storage contract every mlfsd backend implements
// (OSS, HDFS, NAS), the sentinel errors they return, and the URIs that name them.
//
// Keys are '/'-separated paths relative to the backend's root (the prefix or
// directory named by its URI), with no leading slash; "" is the root itself.
// A key ending in '/' names a directory marker. Backends know nothing of FUSE;
// fs/, cache/ and writeback/ talk to storage only through this package.
package backends

import (
	"context"
	"io"
	"time"
)

// Backend is the storage contract. Every method is safe for concurrent use and
// honours ctx cancellation. Errors wrap one of the sentinel errors in errors.go
// where one applies, so callers can use errors.Is.
type Backend interface {
	// ID names this backend instance stably across processes (for example
	// "oss://bucket/prefix/"); caches use it as part of their keys.
	ID() string

	// Stat describes one object or directory. A directory (a NAS or HDFS
	// directory, or an OSS prefix with objects under it or a marker) has
	// IsDir set. A missing key returns an error wrapping ErrNotExist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)

	// List returns one page of the entries under opt.Prefix. Pass the
	// returned NextToken back as opt.Token for the next page; "" means done.
	List(ctx context.Context, opt ListOptions) (ListPage, error)

	// Read opens a ranged reader. Reading past the end of the object yields
	// io.EOF early (a short read), never an error; an offset at or beyond the
	// size yields an empty reader. If opt.IfVersion is set and the object's
	// version differs, Read fails with an error wrapping ErrVersionMismatch.
	Read(ctx context.Context, key string, opt ReadOptions) (io.ReadCloser, error)

	// Write starts a streaming write of key. Nothing is visible under key
	// until Commit returns; Abort (or a failed Commit) leaves no partial
	// object behind. Intermediate directories are created as needed.
	Write(ctx context.Context, key string, opt WriteOptions) (Writer, error)

	// Delete removes one object, or an empty directory (key with or without
	// a trailing '/'). Deleting a missing key returns an error wrapping
	// ErrNotExist. Deleting a non-empty directory wraps ErrNotEmpty.
	Delete(ctx context.Context, key string) error

	// Close releases connections and background goroutines.
	Close() error
}

// ObjectInfo describes one object or directory. It crosses the handover
// socket (in the trees' listings and the staged files): its JSON names are
// the protocol's, fixed by handover/testdata; a rename is a new protocol.
type ObjectInfo struct {
	// Key is relative to the backend root; directories carry no trailing '/'.
	Key     string    `json:"Key"`
	Size    int64     `json:"Size"`
	ModTime time.Time `json:"ModTime"`
	// Version changes whenever the object's content may have changed
	// (OSS ETag; HDFS file id+mtime+size; NAS inode+mtime+size). Caches key
	// data by (Backend.ID, Key, Version).
	Version string `json:"Version"`
	IsDir   bool   `json:"IsDir"`
	// Mode holds permission bits where the store has them (0 otherwise).
	Mode uint32 `json:"Mode"`
	// Owned reports that UID and GID are the object's POSIX owner and
	// group and Mode its exact permission bits, as a POSIX store (NAS)
	// keeps them. An input mount then shows them and has the kernel
	// enforce them. Stores without owners leave it false.
	Owned bool   `json:"Owned"`
	UID   uint32 `json:"UID"`
	GID   uint32 `json:"GID"`
	// Link is the target of a symbolic link, set only in listings that
	// ask for links (ListOptions.Links) from a Linker store. The entry then
	// describes the link itself: IsDir is false, Size is len(Link).
	Link string `json:"Link"`
}

// ListOptions selects a page of a listing.
type ListOptions struct {
	// Prefix restricts the listing to keys starting with it. To list a
	// directory, pass its key followed by '/' ("" for the root).
	Prefix string
	// Recursive lists every key under Prefix; otherwise the listing stops
	// at the next '/' and reports deeper keys as directories (Prefixes).
	Recursive bool
	// Token continues a previous listing ("" starts one).
	Token string
	// StartAfter, when set, starts the listing after this key, as OSS's
	// marker and S3's start-after: only entries that sort after it are
	// listed. Keys compare as byte strings; a file sorts by its Key, a
	// directory by its Key in stores with real directories (NAS, HDFS) and
	// by its Key followed by '/' in stores that keep it as a prefix or a
	// marker (OSS). A listing that starts after s is a suffix of the whole
	// listing, and a larger s gives a shorter suffix: disjoint ranges of one
	// wide directory can be listed in parallel (backends/parlist). Later
	// pages keep it and add Token, which lies beyond it.
	StartAfter string
	// MaxKeys bounds the page size; 0 lets the backend choose (about 1000).
	MaxKeys int
	// Links asks a Linker store to list symbolic links as links (with
	// ObjectInfo.Link set, dangling ones included) instead of as what they
	// lead to. Recursive listings do not descend through them. Stores
	// without links ignore it.
	Links bool
}

// ListPage is one page of a listing, in ascending key order within each slice.
type ListPage struct {
	// Objects holds the files (and, in non-recursive listings, directories
	// that exist as real directories or markers, with IsDir set).
	Objects []ObjectInfo
	// Prefixes holds the keys of sub-directories seen only as common
	// prefixes, without a trailing '/' (non-recursive listings only).
	Prefixes []string
	// NextToken continues the listing; "" means this was the last page.
	NextToken string
}

// ReadOptions selects a byte range and an optional version precondition.
type ReadOptions struct {
	Offset int64
	// Length is the number of bytes wanted; a negative value reads to the end.
	Length int64
	// IfVersion, when set, makes the read fail with ErrVersionMismatch if
	// the object is no longer at that version.
	IfVersion string
}

// WriteOptions carries hints for a streaming write.
type WriteOptions struct {
	// SizeHint is the expected total size, or -1 when unknown. Backends use
	// it to choose between a single PUT and a multipart upload.
	SizeHint int64
	// OnUpload, if set, is called with the ID of a multipart upload the
	// backend starts for this write, before any part is sent. Such an
	// upload holds storage until committed or aborted: the caller records
	// the ID so that, after a crash, it can abort it (UploadAborter).
	OnUpload func(uploadID string)
}

// Writer is a streaming write in progress. It is not safe for concurrent use.
type Writer interface {
	io.Writer
	// Commit finishes the write and publishes the object atomically under
	// its key, returning what the store now holds.
	Commit(ctx context.Context) (ObjectInfo, error)
	// Abort discards everything written. It is safe after Commit (a no-op).
	Abort(ctx context.Context) error
}

// ReaderAtWriter is implemented by Writers that can take an object's whole
// content from a random-access source (a staged file), reading it straight
// from there in parts, in parallel, and again to retry a part, instead of
// through buffers. WriteReaderAt must come before any Write; r must hold
// the same size bytes until Commit returns.
type ReaderAtWriter interface {
	WriteReaderAt(r io.ReaderAt, size int64) error
}

// Renamer is implemented by stores with a server-side rename (NAS, HDFS).
// Rename moves a file or directory; the destination must not exist as a
// directory. Without it, callers copy and delete.
type Renamer interface {
	Rename(ctx context.Context, from, to string) error
}

// Copier is implemented by stores with a server-side copy of one object (OSS).
type Copier interface {
	Copy(ctx context.Context, from, to string) (ObjectInfo, error)
}

// Appender is implemented by stores that can append to an existing object
// (HDFS, NAS). The returned Writer's Commit makes the appended bytes visible.
type Appender interface {
	Append(ctx context.Context, key string) (Writer, error)
}

// DirMaker is implemented by stores with real directories (NAS, HDFS), or
// that represent empty directories with markers (OSS). MakeDir creates key
// and its parents; an existing directory is not an error.
type DirMaker interface {
	MakeDir(ctx context.Context, key string) error
}

// Linker is implemented by stores that keep symbolic links as links of
// their own, distinct from every regular name (NAS: a real symlink; OSS: a
// symlink object). Symlink creates key as a link to target, an arbitrary
// non-empty string that the store never resolves for us; an existing key is
// an error wrapping ErrExist. A link lists with ObjectInfo.Link set when the
// listing asks for links; Delete removes the link itself, Renamer.Rename
// moves the link itself.
type Linker interface {
	Symlink(ctx context.Context, key, target string) error
}

// ExclusiveWriter is implemented by stores that can publish a small object
// only if nothing is at its key yet (OSS x-oss-forbid-overwrite, S3
// If-None-Match, HDFS create without overwrite, NAS link(2)). Of several
// callers racing on one key, across processes and hosts, exactly one
// succeeds; the others get an error wrapping ErrExist and the object stays
// as the winner wrote it. Leases and single-flight markers on a shared store
// are built on it.
type ExclusiveWriter interface {
	WriteExclusive(ctx context.Context, key string, data []byte) (ObjectInfo, error)
}

// EntryLooker is implemented by stores that can tell what one name of a
// directory is without listing the directory: a flat object store, where
// Stat is a HEAD and then, for a missing object, a LIST to find a
// directory. LookupEntry describes key as a listing of its directory shows
// it (where an object and a directory share the name, the directory), in
// at most 2 round trips whatever the directory's size; a missing key
// returns an error wrapping ErrNotExist. Use the function LookupEntry,
// which falls back to Stat for the stores with real directories (NAS,
// HDFS), where Stat is one round trip already.
type EntryLooker interface {
	LookupEntry(ctx context.Context, key string) (ObjectInfo, error)
}

// LookupEntry describes key as a listing of its directory shows it, asking
// the store for that name only (EntryLooker), or else with Stat.
func LookupEntry(ctx context.Context, b Backend, key string) (ObjectInfo, error) {
	if l, ok := As[EntryLooker](b); ok {
		return l.LookupEntry(ctx, key)
	}
	return b.Stat(ctx, key)
}

// Unwrapper is implemented by decorators of a Backend (metrics, fault
// injection), so that the optional interfaces of the backend they wrap stay
// discoverable through As.
type Unwrapper interface {
	Unwrap() Backend
}

// As finds the optional interface T on b or on a backend b decorates. Use it
// instead of a type assertion: a decorator that does not forward every
// optional interface would otherwise hide it.
func As[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	var zero T
	return zero, false
}
