package node

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/backends/objstore"
	"github.com/mlfsd/mlfsd/backends/oss"
	"github.com/mlfsd/mlfsd/backends/s3"
	mfs "github.com/mlfsd/mlfsd/fs"
	"github.com/mlfsd/mlfsd/sharedcache"
)

// Settings are every tunable of a node, typed. Start from Defaults(): the
// zero value is not a working configuration.
type Settings struct {
	Cache   CacheSettings
	Input   InputSettings
	Shared  SharedCacheSettings
	Backend all.Options
	Output  OutputSettings
	// Identity: where a mount's role is assumed with its pod's token.
	Identity IdentitySettings
	// Access: who may reach a mount and the owners and modes it shows.
	Access AccessSettings
}

// AccessSettings say who may reach a mount and which owner, group and
// modes its files show (mount-scope). The overrides are kept as given
// ("" for none), validated by the table, and parsed by Attrs.
type AccessSettings struct {
	// AllowOther lets users other than the daemon's reach the mount
	// (FUSE allow_other), which mlfsd can only give as root.
	AllowOther bool
	// UID and GID own every file and directory ("" for the defaults).
	UID, GID string
	// Umask clears permission bits ("" for none), FileMode and DirMode
	// set them ("" for the defaults); all octal.
	Umask, FileMode, DirMode string
}

// SharedCacheSettings configure the shared block-cache tier that input
// mounts read through between the node's disk cache and the source
// (package sharedcache). They are mount-scope: a mount request (a CSI
// volume attribute) may name its own tier.
type SharedCacheSettings struct {
	// URI is the tier's directory on its store ("" for none).
	URI string
	// MaxBytes bounds the tier (0: the store's lifecycle rule does).
	MaxBytes int64
	// Timeout bounds one block read from the tier.
	Timeout time.Duration
	// KeyFile holds the secret the cluster's nodes share, under which
	// every block of the tier carries a MAC (node-wide: a mount request
	// cannot name it). Required whenever a tier is used.
	KeyFile string
}

// InputSettings configure each input mount (mount-scope).
type InputSettings struct {
	// NoOpen lets a mount stop asking for OPEN once a small-file epoch is
	// read again (fs.InputOptions.KeepOpens is its negation).
	NoOpen bool
	// AllowEmpty mounts a directory channel with nothing in it (a missing
	// prefix) instead of failing.
	AllowEmpty bool
}

// CacheSettings configure the one block cache of a node (node-wide).
type CacheSettings struct {
	Dir                                               string
	MemoryBytes, DiskBytes, FreeFloorBytes, MaxWindow int64
	Requests                                          int
	NoWarm, NoPassthrough                             bool
}

// OutputSettings configure the write-back of output mounts.
type OutputSettings struct {
	StagingDir                      string
	Concurrency, Retries            int
	FsyncDurable, StagingSync       bool
	BandwidthLimit, StreamThreshold int64
	Passthrough                     bool
	// Owner ("UID:GID", "" for the daemon's own) owns what the store
	// already holds, as the output mount reports it to the kernel, which
	// checks permissions against it (mlfsd run --run-as sets the job's).
	Owner string
}

// Scope says where an option may be set.
type Scope int

const (
	// ScopeNode options configure the node itself (its cache, its staging
	// root); a mount request may not change them.
	ScopeNode Scope = iota
	// ScopeMount options are defaults of every mount that a mount request
	// may override (backend and upload tuning).
	ScopeMount
)

// Group sorts options by subsystem, so each subcommand shows only the flags
// it uses.
type Group int

// The option groups.
const (
	GroupCache Group = iota
	GroupOSS
	GroupHDFS
	GroupOutput
	GroupS3
	// GroupMount: who may reach a mount, what it shows, what it needs.
	GroupMount
)

// Option is one row of the options table: a flag of the CLI and a key of a
// mount request's options.
type Option struct {
	Name    string // flag name, without dashes
	Group   Group
	Scope   Scope
	Kind    string // what pflag shows: size, int, bool, duration, string, strings
	Default string // parsed like any value, by Set
	Help    string
	set     func(s *Settings, v string) error // parses and validates v
	get     func(s *Settings) string
}

// Set parses v, validates it and stores it in s. An invalid value is an
// error naming the option and the value; it never becomes a default.
func (o *Option) Set(s *Settings, v string) error {
	if err := o.set(s, v); err != nil {
		return fmt.Errorf("--%s %q: %w", o.Name, v, err)
	}
	return nil
}

// Get returns the value of o in s, formatted as Set accepts it.
func (o *Option) Get(s *Settings) string { return o.get(s) }

// ParseSize parses a byte size with units: 512MiB, 4GiB, 1G, 1048576, 0.
// It is the one size parser of every option.
func ParseSize(v string) (int64, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "-") {
		return 0, fmt.Errorf("a size cannot be negative")
	}
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("not a size (want e.g. 512MiB, 4GiB)")
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("too large")
	}
	return int64(n), nil
}

// FormatSize formats n as ParseSize reads it back.
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	return strings.ReplaceAll(humanize.IBytes(uint64(n)), " ", "")
}

func sizeOpt(name string, g Group, sc Scope, def string, lo, hi int64, help string, p func(*Settings) *int64) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "size", Default: def, Help: help,
		set: func(s *Settings, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			if n < lo || n > hi {
				return fmt.Errorf("want %s to %s", FormatSize(lo), FormatSize(hi))
			}
			*p(s) = n
			return nil
		},
		get: func(s *Settings) string { return FormatSize(*p(s)) },
	}
}

func intOpt(name string, g Group, sc Scope, def, lo, hi int, help string, p func(*Settings) *int) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "int", Default: strconv.Itoa(def), Help: help,
		set: func(s *Settings, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("not a whole number")
			}
			if n < lo || n > hi {
				return fmt.Errorf("want %d to %d", lo, hi)
			}
			*p(s) = n
			return nil
		},
		get: func(s *Settings) string { return strconv.Itoa(*p(s)) },
	}
}

func boolOpt(name string, g Group, sc Scope, def bool, help string, p func(*Settings) *bool) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "bool", Default: strconv.FormatBool(def), Help: help,
		set: func(s *Settings, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("want true or false")
			}
			*p(s) = b
			return nil
		},
		get: func(s *Settings) string { return strconv.FormatBool(*p(s)) },
	}
}

func durOpt(name string, g Group, sc Scope, def time.Duration, help string, p func(*Settings) *time.Duration) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "duration", Default: def.String(), Help: help,
		set: func(s *Settings, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("not a duration (want e.g. 30s, 2m)")
			}
			if d <= 0 {
				return fmt.Errorf("want more than 0")
			}
			*p(s) = d
			return nil
		},
		get: func(s *Settings) string { return (*p(s)).String() },
	}
}

func strOpt(name string, g Group, sc Scope, def, help string, p func(*Settings) *string) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "string", Default: def, Help: help,
		set: func(s *Settings, v string) error {
			if strings.ContainsAny(v, "\x00\n") {
				return fmt.Errorf("contains a NUL or newline")
			}
			*p(s) = v
			return nil
		},
		get: func(s *Settings) string { return *p(s) },
	}
}

func listOpt(name string, g Group, sc Scope, help string, p func(*Settings) *[]string) Option {
	return Option{Name: name, Group: g, Scope: sc, Kind: "strings", Help: help,
		set: func(s *Settings, v string) error {
			var out []string
			for _, f := range strings.Split(v, ",") {
				if f = strings.TrimSpace(f); f != "" {
					out = append(out, f)
				}
			}
			*p(s) = out
			return nil
		},
		get: func(s *Settings) string { return strings.Join(*p(s), ",") },
	}
}

// idOpt is a uid or gid: a number, or "" for none.
func idOpt(name, help string, p func(*Settings) *string) Option {
	return Option{Name: name, Group: GroupMount, Scope: ScopeMount, Kind: "string", Help: help,
		set: func(s *Settings, v string) error {
			v = strings.TrimSpace(v)
			if v != "" {
				if _, err := strconv.ParseUint(v, 10, 32); err != nil {
					return fmt.Errorf("want a number (a name would resolve differently inside and outside a container)")
				}
			}
			*p(s) = v
			return nil
		},
		get: func(s *Settings) string { return *p(s) },
	}
}

// modeOpt is octal permission bits, or "" for none.
func modeOpt(name, help string, p func(*Settings) *string) Option {
	return Option{Name: name, Group: GroupMount, Scope: ScopeMount, Kind: "string", Help: help,
		set: func(s *Settings, v string) error {
			v = strings.TrimSpace(v)
			if v != "" {
				if _, err := parseMode(v); err != nil {
					return err
				}
			}
			*p(s) = v
			return nil
		},
		get: func(s *Settings) string { return *p(s) },
	}
}

// parseMode parses octal permission bits (0440, 440, 0o440).
func parseMode(v string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("want octal permission bits, e.g. 0440")
	}
	return uint32(n), nil
}

// Attrs returns the owner and mode overrides of a, validated by the table.
func (a AccessSettings) Attrs() (mfs.Attrs, error) {
	var out mfs.Attrs
	id := func(v string) (*uint32, error) {
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q: want a number", v)
		}
		u := uint32(n)
		return &u, nil
	}
	mode := func(v string) (*uint32, error) {
		if v == "" {
			return nil, nil
		}
		m, err := parseMode(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		return &m, nil
	}
	var err error
	if out.UID, err = id(a.UID); err != nil {
		return out, fmt.Errorf("uid %w", err)
	}
	if out.GID, err = id(a.GID); err != nil {
		return out, fmt.Errorf("gid %w", err)
	}
	if out.FileMode, err = mode(a.FileMode); err != nil {
		return out, fmt.Errorf("file-mode %w", err)
	}
	if out.DirMode, err = mode(a.DirMode); err != nil {
		return out, fmt.Errorf("dir-mode %w", err)
	}
	if m, err := mode(a.Umask); err != nil {
		return out, fmt.Errorf("umask %w", err)
	} else if m != nil {
		out.Umask = *m
	}
	return out, nil
}

// defaultCacheDir is where the disk cache lives unless told otherwise.
func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "mlfsd")
	}
	return filepath.Join(os.TempDir(), "mlfsd-cache")
}

// Table returns the options table: every tunable, its default, its help and
// its validation, in one place. cmd generates its flags from it and mount
// requests are validated against it.
func Table() []Option {
	const maxSize = 1 << 62
	return []Option{
		// The read cache (node-wide).
		strOpt("cache-dir", GroupCache, ScopeNode, defaultCacheDir(),
			`disk cache of input data; it survives restarts ("" keeps no disk cache)`,
			func(s *Settings) *string { return &s.Cache.Dir }),
		sizeOpt("cache-memory", GroupCache, ScopeNode, "512MiB", 1<<20, maxSize,
			"memory cache size (e.g. 512MiB, 4GiB); the daemon stays within this plus 256MiB",
			func(s *Settings) *int64 { return &s.Cache.MemoryBytes }),
		sizeOpt("cache-disk", GroupCache, ScopeNode, "0", 0, maxSize,
			"most bytes the disk cache holds (0: bounded only by --cache-free-floor)",
			func(s *Settings) *int64 { return &s.Cache.DiskBytes }),
		sizeOpt("cache-free-floor", GroupCache, ScopeNode, "2GiB", 0, maxSize,
			"free space the disk cache always leaves on its filesystem",
			func(s *Settings) *int64 { return &s.Cache.FreeFloorBytes }),
		sizeOpt("prefetch-window", GroupCache, ScopeNode, "128MiB", 1<<20, maxSize,
			"largest readahead window of a sequential reader (at most a quarter of --cache-memory)",
			func(s *Settings) *int64 { return &s.Cache.MaxWindow }),
		intOpt("prefetch-requests", GroupCache, ScopeNode, 64, 1, 4096,
			"most ranged reads in flight to backends, over all files",
			func(s *Settings) *int { return &s.Cache.Requests }),
		boolOpt("no-prefetch-dirs", GroupCache, ScopeNode, false,
			"do not fetch a directory's other small files ahead once several of them were opened",
			func(s *Settings) *bool { return &s.Cache.NoWarm }),
		boolOpt("no-passthrough", GroupCache, ScopeNode, false,
			"serve cached files through the daemon instead of FUSE passthrough",
			func(s *Settings) *bool { return &s.Cache.NoPassthrough }),
		boolOpt("input-no-open", GroupCache, ScopeMount, true,
			"let an input mount stop asking for OPEN and RELEASE once 16 distinct small files it holds whole were opened again (a second epoch costs the daemon nothing); its later opens then get no passthrough. false keeps every open, and passthrough for files complete in the cache",
			func(s *Settings) *bool { return &s.Input.NoOpen }),

		// Access to a mount, and what it must hold (see README, "Mount options").
		boolOpt("allow-other", GroupMount, ScopeMount, true,
			"let users other than mlfsd's own reach the mount (FUSE allow_other): jobs run as other users than the daemon. Given only when mlfsd runs as root; false leaves the mount to root alone",
			func(s *Settings) *bool { return &s.Access.AllowOther }),
		idOpt("uid", "owner (a number) of every file and directory of the mount; the kernel enforces it (default: on inputs the NAS's, else root; on outputs, for what the store already holds, --output-owner, else mlfsd's user)",
			func(s *Settings) *string { return &s.Access.UID }),
		idOpt("gid", "group (a number) of every file and directory of the mount; the kernel enforces it (default: as for uid)",
			func(s *Settings) *string { return &s.Access.GID }),
		modeOpt("umask", "octal bits cleared from the modes the mount shows, e.g. 022, 027 (default: none; file-mode and dir-mode are not masked)",
			func(s *Settings) *string { return &s.Access.Umask }),
		modeOpt("file-mode", "octal permission bits of every file, e.g. 0440 (default: on inputs the NAS's, else 0444 plus the store's execute bits; on outputs the store's (NAS, HDFS), else 0644)",
			func(s *Settings) *string { return &s.Access.FileMode }),
		modeOpt("dir-mode", "octal permission bits of every directory, e.g. 0550 (default: on inputs the NAS's, else 0555; on outputs the store's (NAS, HDFS), else 0755)",
			func(s *Settings) *string { return &s.Access.DirMode }),
		boolOpt("allow-empty", GroupMount, ScopeMount, false,
			"mount an input directory with nothing in it (an OSS or S3 prefix that does not exist, or an empty directory) instead of failing naming its URI",
			func(s *Settings) *bool { return &s.Input.AllowEmpty }),

		// The shared cache tier (cluster-wide; see docs/SHARED-CACHE.md).
		{Name: "shared-cache", Group: GroupCache, Scope: ScopeMount, Kind: "string",
			Help: `shared block-cache tier between the disk cache and the source, a directory on a store every node reaches (e.g. oss://cache-bucket/mlfsd/ on an in-region or OSS accelerator bucket, s3://cache/mlfsd/?endpoint=http://minio:9000 on an in-cluster MinIO, nas:///mnt/shared/mlfsd-cache/; "" for none)`,
			set: func(s *Settings, v string) error {
				if v != "" {
					u, err := backends.ParseURI(v)
					if err != nil {
						return err
					}
					if !u.IsDir() {
						return fmt.Errorf("%q: the shared cache is a directory URI (end it with '/')", v)
					}
				}
				s.Shared.URI = v
				return nil
			},
			get: func(s *Settings) string { return s.Shared.URI }},
		sizeOpt("shared-cache-size", GroupCache, ScopeMount, "0", 0, maxSize,
			"most bytes the shared cache tier holds, kept by a sweep one node at a time runs under a lease (0: bounded by the store's lifecycle rule)",
			func(s *Settings) *int64 { return &s.Shared.MaxBytes }),
		durOpt("shared-cache-timeout", GroupCache, ScopeMount, sharedcache.DefaultTimeout,
			"deadline of one block read from the shared cache tier; past it (or on any error) the block is read from the source (the default is about 4x the p99 of that read measured on a loaded node)",
			func(s *Settings) *time.Duration { return &s.Shared.Timeout }),
		strOpt("shared-cache-key-file", GroupCache, ScopeNode, "",
			"file holding the secret key every node of the cluster shares (at least 16 bytes, e.g. a Kubernetes Secret mounted as a file): each block of the shared cache tier carries an HMAC-SHA256 under it, checked on every read, so a block anyone else wrote is never served; required with --shared-cache",
			func(s *Settings) *string { return &s.Shared.KeyFile }),

		// OSS. Access keys are never options: they come from the
		// environment, a credentials file, or a mount request's Credentials.
		strOpt("oss-endpoint", GroupOSS, ScopeMount, "",
			"OSS endpoint when the URI has none (default $OSS_ENDPOINT), e.g. oss-cn-hangzhou.aliyuncs.com or http://127.0.0.1:9000",
			func(s *Settings) *string { return &s.Backend.OSS.Endpoint }),
		strOpt("oss-region", GroupOSS, ScopeMount, "",
			"OSS region V4 signatures name when the endpoint names none (oss-REGION.aliyuncs.com does; default $OSS_REGION, cn-hangzhou for an IP or localhost)",
			func(s *Settings) *string { return &s.Backend.OSS.Region }),
		{Name: "oss-signature-version", Group: GroupOSS, Scope: ScopeMount, Kind: "string", Default: "v4",
			Help: `OSS request signatures: "v4" (OSS4-HMAC-SHA256, required of new accounts and buckets) or "v1" where it is still accepted`,
			set: func(s *Settings, v string) error {
				if v != "v4" && v != "v1" && v != "" {
					return fmt.Errorf(`want v4 or v1`)
				}
				s.Backend.OSS.SignatureVersion = v
				return nil
			},
			get: func(s *Settings) string {
				if s.Backend.OSS.SignatureVersion == "" {
					return "v4"
				}
				return s.Backend.OSS.SignatureVersion
			}},
		strOpt("oss-credentials-file", GroupOSS, ScopeNode, "",
			"file with accessKeyID/accessKeySecret[/stsToken] lines (mode 0600); default: the OSS_ACCESS_KEY_* environment, else the Alibaba Cloud default chain (see README, Credentials)",
			func(s *Settings) *string { return &s.Backend.OSS.CredentialsFile }),
		strOpt("oss-sts-endpoint", GroupOSS, ScopeNode, "",
			"Alibaba Cloud STS host where a mount that brings an OSS role and a pod's OIDC token (RRSA) assumes it, always over HTTPS (default: sts.aliyuncs.com, or sts.$ALIBABA_CLOUD_STS_REGION.aliyuncs.com)",
			func(s *Settings) *string { return &s.Identity.OSSSTSEndpoint }),
		sizeOpt("oss-multipart-threshold", GroupOSS, ScopeMount, FormatSize(objstore.DefaultMultipartThreshold), 0, objstore.MaxPartSize,
			"OSS writes larger than this use a multipart upload",
			func(s *Settings) *int64 { return &s.Backend.OSS.MultipartThreshold }),
		sizeOpt("oss-part-size", GroupOSS, ScopeMount, FormatSize(objstore.DefaultPartSize), oss.MinPartSize, objstore.MaxPartSize,
			"OSS multipart part size",
			func(s *Settings) *int64 { return &s.Backend.OSS.PartSize }),
		intOpt("oss-upload-concurrency", GroupOSS, ScopeMount, objstore.DefaultConcurrency, 1, objstore.MaxConcurrency,
			"parts of one streaming OSS write (an upload before close, or under --upload-bwlimit) uploaded in parallel; each holds a part in memory",
			func(s *Settings) *int { return &s.Backend.OSS.Concurrency }),
		intOpt("oss-staged-upload-concurrency", GroupOSS, ScopeMount, objstore.DefaultStagedConcurrency, 1, objstore.MaxConcurrency,
			"parts of one closed output file uploaded to OSS in parallel; each reads its part from the staging disk, so they cost no memory",
			func(s *Settings) *int { return &s.Backend.OSS.StagedConcurrency }),
		intOpt("oss-retry-attempts", GroupOSS, ScopeMount, backends.DefaultMaxAttempts, 1, 1000,
			"tries of one OSS request on 5xx, throttling and connection errors",
			func(s *Settings) *int { return &s.Backend.OSS.Retry.MaxAttempts }),
		durOpt("oss-retry-max-time", GroupOSS, ScopeMount, backends.DefaultMaxElapsed,
			"time bound on retrying one OSS request",
			func(s *Settings) *time.Duration { return &s.Backend.OSS.Retry.MaxElapsed }),
		durOpt("oss-connect-timeout", GroupOSS, ScopeMount, objstore.DefaultConnectTimeout,
			"bound on the first contact with an OSS endpoint (connect and first answer); one that stays silent is named in the error",
			func(s *Settings) *time.Duration { return &s.Backend.OSS.ConnectTimeout }),

		// S3 and S3-compatible stores. Access keys are never options: they
		// come from the AWS_* environment or a credentials file.
		strOpt("s3-endpoint", GroupS3, ScopeMount, "",
			"S3 endpoint when the URI has no endpoint= (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS S3), e.g. http://minio.storage.svc:9000",
			func(s *Settings) *string { return &s.Backend.S3.Endpoint }),
		strOpt("s3-region", GroupS3, ScopeMount, "",
			"S3 region when the URI has no region= (default $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1)",
			func(s *Settings) *string { return &s.Backend.S3.Region }),
		strOpt("s3-sts-endpoint", GroupS3, ScopeNode, "",
			"AWS STS endpoint URL where a mount that brings an IAM role and a pod's web identity token (IRSA) assumes it (default: the SDK's, for the S3 region)",
			func(s *Settings) *string { return &s.Identity.S3STSEndpoint }),
		{Name: "s3-path-style", Group: GroupS3, Scope: ScopeMount, Kind: "string",
			Help: `S3 addressing when the URI has no path_style=: "true" (host/bucket/key), "false" (bucket.host/key), "" (path style with an endpoint, virtual-hosted on AWS)`,
			set: func(s *Settings, v string) error {
				if v != "" && v != "true" && v != "false" {
					return fmt.Errorf(`want true, false or ""`)
				}
				s.Backend.S3.PathStyle = v
				return nil
			},
			get: func(s *Settings) string { return s.Backend.S3.PathStyle }},
		{Name: "s3-upload-checksums", Group: GroupS3, Scope: ScopeMount, Kind: "string",
			Help: `CRC-32 on S3 writes, kept by the store: "crc32", "off", or "" (crc32 on AWS, off with an endpoint: older S3-compatible stores refuse the SDK's checksum trailers; the body is still checked in transit)`,
			set: func(s *Settings, v string) error {
				if v != "" && v != "crc32" && v != "off" {
					return fmt.Errorf(`want crc32, off or ""`)
				}
				s.Backend.S3.UploadChecksums = v
				return nil
			},
			get: func(s *Settings) string { return s.Backend.S3.UploadChecksums }},
		strOpt("s3-credentials-file", GroupS3, ScopeNode, "",
			"AWS shared credentials file the SDK's default chain reads instead of ~/.aws/credentials (profile $AWS_PROFILE, the URI's profile=, or default), mode 0600; the chain's other sources apply (see README, Credentials)",
			func(s *Settings) *string { return &s.Backend.S3.CredentialsFile }),
		sizeOpt("s3-multipart-threshold", GroupS3, ScopeMount, FormatSize(objstore.DefaultMultipartThreshold), 0, objstore.MaxPartSize,
			"S3 writes larger than this use a multipart upload",
			func(s *Settings) *int64 { return &s.Backend.S3.MultipartThreshold }),
		sizeOpt("s3-part-size", GroupS3, ScopeMount, FormatSize(objstore.DefaultPartSize), s3.MinPartSize, objstore.MaxPartSize,
			"S3 multipart part size",
			func(s *Settings) *int64 { return &s.Backend.S3.PartSize }),
		intOpt("s3-upload-concurrency", GroupS3, ScopeMount, objstore.DefaultConcurrency, 1, objstore.MaxConcurrency,
			"parts of one streaming S3 write (an upload before close, or under --upload-bwlimit) uploaded in parallel; each holds a part in memory",
			func(s *Settings) *int { return &s.Backend.S3.Concurrency }),
		intOpt("s3-staged-upload-concurrency", GroupS3, ScopeMount, objstore.DefaultStagedConcurrency, 1, objstore.MaxConcurrency,
			"parts of one closed output file uploaded to S3 in parallel; each reads its part from the staging disk, so they cost no memory",
			func(s *Settings) *int { return &s.Backend.S3.StagedConcurrency }),
		intOpt("s3-retry-attempts", GroupS3, ScopeMount, backends.DefaultMaxAttempts, 1, 1000,
			"tries of one S3 request on 5xx, throttling, timeouts and connection errors",
			func(s *Settings) *int { return &s.Backend.S3.Retry.MaxAttempts }),
		durOpt("s3-retry-max-time", GroupS3, ScopeMount, backends.DefaultMaxElapsed,
			"time bound on retrying one S3 request",
			func(s *Settings) *time.Duration { return &s.Backend.S3.Retry.MaxElapsed }),
		durOpt("s3-connect-timeout", GroupS3, ScopeMount, objstore.DefaultConnectTimeout,
			"bound on the first contact with an S3 endpoint (connect and first answer), and on every connect after it",
			func(s *Settings) *time.Duration { return &s.Backend.S3.ConnectTimeout }),

		// HDFS. Authentication is SIMPLE (the user is a name, not a
		// secret) or Kerberos (a keytab or a ticket cache).
		strOpt("hdfs-user", GroupHDFS, ScopeMount, "",
			"HDFS user to act as (default $HADOOP_USER_NAME, then the current user)",
			func(s *Settings) *string { return &s.Backend.HDFS.User }),
		listOpt("hdfs-namenodes", GroupHDFS, ScopeMount,
			"HDFS NameNode addresses host:port, comma-separated (HA); replaces the hosts of hdfs:// URIs",
			func(s *Settings) *[]string { return &s.Backend.HDFS.Namenodes }),
		strOpt("hdfs-conf-dir", GroupHDFS, ScopeMount, "",
			"Hadoop configuration directory, to resolve HA nameservices in hdfs:// URIs (default $HADOOP_CONF_DIR)",
			func(s *Settings) *string { return &s.Backend.HDFS.ConfDir }),
		// The Kerberos identity of the node is the administrator's to set:
		// a mount request names no host file (its own keytab comes in its
		// credentials).
		strOpt("hdfs-principal", GroupHDFS, ScopeNode, "",
			"Kerberos principal user@REALM to log in as with --hdfs-keytab (turns Kerberos on)",
			func(s *Settings) *string { return &s.Backend.HDFS.Kerberos.Principal }),
		strOpt("hdfs-keytab", GroupHDFS, ScopeNode, "",
			"keytab file of --hdfs-principal; mlfsd logs in again before the ticket expires",
			func(s *Settings) *string { return &s.Backend.HDFS.Kerberos.KeytabFile }),
		strOpt("hdfs-ccache", GroupHDFS, ScopeNode, "",
			"Kerberos ticket cache to use instead of a keytab (turns Kerberos on; default $KRB5CCNAME when hadoop.security.authentication=kerberos)",
			func(s *Settings) *string { return &s.Backend.HDFS.Kerberos.CCacheFile }),
		strOpt("hdfs-krb5-conf", GroupHDFS, ScopeNode, "",
			"krb5.conf for Kerberos (default $KRB5_CONFIG, then /etc/krb5.conf)",
			func(s *Settings) *string { return &s.Backend.HDFS.Kerberos.Krb5Conf }),
		strOpt("hdfs-namenode-principal", GroupHDFS, ScopeMount, "",
			"the NameNode's Kerberos principal, e.g. nn/_HOST@REALM (default dfs.namenode.kerberos.principal from the Hadoop configuration)",
			func(s *Settings) *string { return &s.Backend.HDFS.Kerberos.ServicePrincipal }),
		intOpt("hdfs-retries", GroupHDFS, ScopeMount, 5, 1, 1000,
			"attempts for an HDFS operation that fails transiently",
			func(s *Settings) *int { return &s.Backend.HDFS.Retries }),
		durOpt("hdfs-connect-timeout", GroupHDFS, ScopeMount, 10*time.Second,
			"bound on a NameNode's first answer on a new connection; one that stays silent is named in the error",
			func(s *Settings) *time.Duration { return &s.Backend.HDFS.ConnectTimeout }),

		// Output channels (write-back).
		{Name: "output-owner", Group: GroupOutput, Scope: ScopeMount, Kind: "string",
			Help: `UID:GID that owns what the store already holds on an output mount (the kernel checks permissions against it; default: mlfsd's own)`,
			set: func(s *Settings, v string) error {
				if v != "" {
					if _, err := ParseOwner(v); err != nil {
						return err
					}
				}
				s.Output.Owner = v
				return nil
			},
			get: func(s *Settings) string { return s.Output.Owner }},
		strOpt("staging-dir", GroupOutput, ScopeNode, "/var/lib/mlfsd/staging",
			"local directory where output files are staged and the upload journal is kept; restart on the same dir to finish uploads",
			func(s *Settings) *string { return &s.Output.StagingDir }),
		intOpt("upload-concurrency", GroupOutput, ScopeMount, 4, 1, 1024,
			"output files uploaded at once",
			func(s *Settings) *int { return &s.Output.Concurrency }),
		boolOpt("fsync-durable", GroupOutput, ScopeMount, true,
			"fsync on an output file returns only once the file is durable in the backend (false: once journaled locally)",
			func(s *Settings) *bool { return &s.Output.FsyncDurable }),
		boolOpt("staging-fsync", GroupOutput, ScopeMount, false,
			"fsync staged data at close, so closed files also survive a machine crash before upload",
			func(s *Settings) *bool { return &s.Output.StagingSync }),
		intOpt("upload-retries", GroupOutput, ScopeMount, 10, 1, 1000,
			"attempts of a failing upload before it is reported as failed",
			func(s *Settings) *int { return &s.Output.Retries }),
		sizeOpt("upload-bwlimit", GroupOutput, ScopeMount, "0", 0, maxSize,
			"cap on upload throughput per output channel, in bytes per second, e.g. 100MiB (0 = none)",
			func(s *Settings) *int64 { return &s.Output.BandwidthLimit }),
		sizeOpt("upload-stream-threshold", GroupOutput, ScopeMount, "0", 0, maxSize,
			"a file written sequentially from empty starts uploading before close once this much is staged, e.g. 16MiB (0 = only after close)",
			func(s *Settings) *int64 { return &s.Output.StreamThreshold }),
		boolOpt("output-passthrough", GroupOutput, ScopeMount, true,
			"let the kernel write output files' staging files directly (FUSE passthrough; needs root); false routes writes through mlfsd",
			func(s *Settings) *bool { return &s.Output.Passthrough }),
	}
}

// lookup returns the table row of name.
func lookup(name string) (*Option, bool) {
	for _, o := range Table() {
		if o.Name == name {
			return &o, true
		}
	}
	return nil, false
}

// Defaults returns the settings every option's default gives.
func Defaults() Settings {
	var s Settings
	for _, o := range Table() {
		if err := o.set(&s, o.Default); err != nil && o.Kind != "strings" {
			panic(fmt.Sprintf("options table: default of --%s: %v", o.Name, err)) // a bug in the table
		}
	}
	return s
}

// Validate checks settings built in code (not through Set) against the
// table's rules, by formatting each value and parsing it back.
func (s Settings) Validate() error {
	for _, o := range Table() {
		probe := s
		if err := o.Set(&probe, o.Get(&s)); err != nil {
			return err
		}
	}
	return nil
}

// WithMountOptions returns s with a mount request's options applied. Every
// name must be a mount-scope option of the table and every value valid.
func (s Settings) WithMountOptions(opts map[string]string) (Settings, error) {
	names := make([]string, 0, len(opts))
	for k := range opts {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		o, ok := lookup(name)
		if !ok {
			return s, fmt.Errorf("unknown mount option %q", name)
		}
		if o.Scope != ScopeMount {
			return s, fmt.Errorf("option --%s is node-wide: set it where the node starts, not per mount", name)
		}
		if err := o.Set(&s, opts[name]); err != nil {
			return s, err
		}
	}
	return s, nil
}

// AddFlags adds the flags of the given groups to fs, bound to s: each flag
// parses and validates its value as it is set.
func AddFlags(fs *pflag.FlagSet, s *Settings, groups ...Group) {
	for _, o := range Table() {
		if !inGroups(o.Group, groups) {
			continue
		}
		if err := o.set(s, o.Default); err != nil && o.Kind != "strings" {
			panic(fmt.Sprintf("options table: default of --%s: %v", o.Name, err))
		}
		o := o
		f := fs.VarPF(&flagValue{o: &o, s: s}, o.Name, "", o.Help)
		if o.Kind == "bool" {
			f.NoOptDefVal = "true"
		}
	}
}

func inGroups(g Group, gs []Group) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// MountFlags returns the mount-scope flags changed on fs, as mount request
// options, and an error naming any node-scope flag that was changed: a
// client of a daemon cannot change those.
func MountFlags(fs *pflag.FlagSet) (map[string]string, error) {
	out := map[string]string{}
	var err error
	fs.Visit(func(f *pflag.Flag) {
		o, ok := lookup(f.Name)
		if !ok || err != nil {
			return
		}
		if o.Scope != ScopeMount {
			err = fmt.Errorf("--%s is node-wide: give it to `mlfsd daemon`, not to a client", f.Name)
			return
		}
		out[f.Name] = f.Value.String()
	})
	return out, err
}

// flagValue is a pflag.Value over one option of a Settings.
type flagValue struct {
	o *Option
	s *Settings
}

func (f *flagValue) String() string {
	if f.s == nil {
		return ""
	}
	return f.o.get(f.s)
}

func (f *flagValue) Set(v string) error {
	if err := f.o.set(f.s, v); err != nil {
		return err // pflag names the flag and the value
	}
	return nil
}

func (f *flagValue) Type() string { return f.o.Kind }

// ParseOwner parses "UID:GID" (numbers).
func ParseOwner(v string) (mfs.Owner, error) {
	u, g, ok := strings.Cut(v, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return mfs.Owner{}, fmt.Errorf("want UID:GID, two numbers")
	}
	return mfs.Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}
