// Package oss is the mlfsd backend for oss:// URIs, over the aliyun OSS Go
// SDK (github.com/aliyun/aliyun-oss-go-sdk/oss).
//
// Keys map to object names under the URI's prefix. Versions are ETags.
// Reads are ranged GETs that resume after a failure from where they stopped
// (pinned to the ETag first seen, with If-Match); whole-object reads are
// checked against the server's CRC64. Writes go up as one PUT when small,
// or as a streaming multipart upload with parallel parts; every request is
// CRC64-checked by the SDK and retried here (see RetryOptions).
// Directories are prefixes; MakeDir writes a "key/" marker object.
package oss

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/aliyun/credentials-go/credentials/providers"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/objstore"
	"github.com/mlfsd/mlfsd/backends/prefixdirs"
)

// Options configures the backend. Zero values take the defaults noted.
// Secrets are not options: they come from the environment or a file.
type Options struct {
	// Endpoint is used when the URI carries none (oss://bucket/prefix/);
	// OSS_ENDPOINT is the fallback. Examples: oss-cn-hangzhou.aliyuncs.com,
	// http://127.0.0.1:9000.
	Endpoint string
	// Region is the region V4 signatures name when the endpoint names
	// none (oss-REGION.aliyuncs.com does); OSS_REGION is the fallback, and
	// LocalRegion for an IP address or localhost.
	Region string
	// SignatureVersion is "v4" (the default: OSS4-HMAC-SHA256, which
	// Alibaba Cloud requires of new accounts and buckets) or "v1".
	SignatureVersion string
	// CredentialsFile, when set, holds the access key (see
	// readCredentialsFile); it must not be accessible by group or others.
	// Otherwise OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET and
	// OSS_SESSION_TOKEN are used when set, and else the Alibaba Cloud
	// default credential chain (ChainSources), whose short-lived keys are
	// renewed before they expire.
	CredentialsFile string
	// Credentials, when set, are used instead of CredentialsFile and the
	// environment (a node daemon mounts with the credentials of the client
	// that asked).
	Credentials *Credentials
	// CredentialsProvider, when set, is asked for the keys of every
	// request, before any other source: a credentials-go provider built
	// for this mount alone (an OIDC role with the pod's token, say).
	// Not marshalled: a provider is code, not configuration.
	CredentialsProvider providers.CredentialsProvider `json:"-"`
	// MultipartThreshold: writes larger than this use a multipart upload
	// (default 16 MiB); smaller ones are one PUT.
	MultipartThreshold int64
	// PartSize is the size of multipart parts (default 8 MiB, at least
	// 100 KiB); it grows for very large objects to stay within 10000 parts.
	PartSize int64
	// Concurrency is the number of parts of one streaming write uploaded
	// in parallel (default 4). Such a write buffers at most Concurrency+1
	// parts in memory.
	Concurrency int
	// StagedConcurrency is the number of parts of one write from a file
	// (backends.ReaderAtWriter, as the write-back uploads a staged file)
	// uploaded in parallel (default 16). Each part reads its bytes from the
	// file itself, so they cost no memory, and a store takes parts faster
	// side by side than one connection carries them.
	StagedConcurrency int
	// Retry bounds retries of every call.
	Retry RetryOptions
	// ConnectTimeout bounds the first contact, in New: connecting and
	// getting a first answer from the endpoint, retries included (default
	// DefaultConnectTimeout). An endpoint that accepts connections and
	// never answers is reported by name instead of holding New for the
	// per-request timeout (120 s) times the retries.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is Options.ConnectTimeout's default.
const DefaultConnectTimeout = objstore.DefaultConnectTimeout

// rwTimeout bounds each read or write on a connection (the SDK's
// read/write timeout); an idle connection may wait ten times as long.
const rwTimeout = 120 * time.Second

// MinPartSize is the smallest multipart part OSS takes (but the last).
const MinPartSize = 100 << 10

const (
	maxPartSize  = objstore.MaxPartSize
	maxParts     = objstore.MaxParts
	listPageSize = 1000
)

// store is OSS's part of the options' validation.
var store = objstore.Store{Name: "OSS", MinPartSize: MinPartSize, MinPartSizeText: "100 KiB"}

// withDefaults fills and checks the options (objstore.Store.Apply).
func (o Options) withDefaults() (Options, error) {
	err := store.Apply(objstore.Transfer{
		MultipartThreshold: &o.MultipartThreshold, PartSize: &o.PartSize,
		Concurrency: &o.Concurrency, StagedConcurrency: &o.StagedConcurrency,
		ConnectTimeout: &o.ConnectTimeout, Retry: &o.Retry,
	})
	return o, err
}

// Backend is an OSS bucket prefix.
type Backend struct {
	prefixdirs.Dirs // Stat, List, Delete, MakeDir: the bucket's directory view under prefix

	bucket       *alioss.Bucket
	bucketName   string
	prefix       string // "" or ending in '/'
	id           string
	endpointHost string
	hc           *http.Client // the SDK's client: its idle connections close with the backend
	opt          Options
	retryOpt     RetryOptions
	log          *slog.Logger
	cred         *credProvider
}

var (
	_ backends.Backend  = (*Backend)(nil)
	_ backends.Copier   = (*Backend)(nil)
	_ backends.DirMaker = (*Backend)(nil)
)

// New opens the backend rooted at the directory URI u. It checks that the
// bucket exists and that the credentials may list it, so a wrong endpoint,
// bucket or key fails here, with a message that says what to fix.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	if u.Scheme != backends.SchemeOSS {
		return nil, fmt.Errorf("oss backend: URI scheme %q is not oss", u.Scheme)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	epURL, host, pathStyle, err := resolveEndpoint(u.Endpoint, opt.Endpoint)
	if err != nil {
		return nil, err
	}
	authVersion, region, err := resolveSigning(host, pathStyle, opt.Region, opt.SignatureVersion)
	if err != nil {
		return nil, err
	}
	cred, err := newCredProvider(opt)
	if err != nil {
		return nil, err
	}
	if err := cred.check(); err != nil {
		return nil, err
	}
	copts := []alioss.ClientOption{
		alioss.EnableCRC(true),
		alioss.ForcePathStyle(pathStyle),
		alioss.Timeout(int64(math.Ceil(opt.ConnectTimeout.Seconds())), int64(rwTimeout/time.Second)),
		alioss.MaxConns(256, 256, 0),
		alioss.SetCredentialsProvider(cred),
		alioss.AuthVersion(authVersion),
	}
	if region != "" {
		copts = append(copts, alioss.Region(region))
	}
	hc := newHTTPClient(strings.HasPrefix(epURL, "https:"), opt.ConnectTimeout, rwTimeout)
	copts = append(copts, alioss.HTTPClient(hc))
	client, err := alioss.New(epURL, "", "", copts...)
	if err != nil {
		return nil, fmt.Errorf("OSS endpoint %s: %w", epURL, err)
	}
	bkt, err := client.Bucket(u.Bucket)
	if err != nil {
		return nil, fmt.Errorf("OSS bucket %q: %w", u.Bucket, err)
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	idURI := u
	idURI.Endpoint = host
	b := &Backend{
		bucket: bkt, bucketName: u.Bucket, prefix: prefix, id: idURI.String(),
		endpointHost: host, hc: hc, opt: opt, retryOpt: opt.Retry, log: log, cred: cred,
	}
	b.Dirs = prefixdirs.NewDirs(prefixdirs.Namespace{Store: dirStore{b}, Prefix: prefix, PageSize: listPageSize, Truncated: errTruncated})
	// Probe: one listing of the prefix proves bucket, endpoint and key.
	// It is the first contact, bounded by ConnectTimeout.
	probeCtx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	err = b.retry(probeCtx, func() error {
		_, err := b.bucket.ListObjectsV2(alioss.Prefix(prefix), alioss.MaxKeys(1), alioss.WithContext(probeCtx))
		return err
	})
	if err != nil {
		b.Close() // a refused probe left its connection idle
	}
	if err != nil {
		return nil, b.probeErr(ctx, probeCtx, epURL, err)
	}
	log.Debug("oss backend opened", "uri", b.id, "path_style", pathStyle, "signature", authVersion, "region", region, "credentials", cred.source)
	return b, nil
}

// probeErr explains why the first listing failed, naming the endpoint and
// what to check: the first thing a new user sees of a wrong endpoint.
func (b *Backend) probeErr(ctx, probeCtx context.Context, epURL string, err error) error {
	var netErr net.Error
	switch {
	case ctx.Err() != nil:
		return b.wrapErr("list", "", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Retried until the connect timeout (a server may be starting),
		// then said as it is: a refusal, not silence.
		return backends.Explain(fmt.Sprintf("OSS endpoint %s refused the connection: nothing listens there; check the endpoint (--oss-endpoint, OSS_ENDPOINT or the URI) and that the server is up", epURL), backends.ErrTransient, err)
	case probeCtx.Err() != nil:
		return backends.Explain(fmt.Sprintf("OSS endpoint %s did not answer within %v (connect timeout; is it the right endpoint, and reachable?): %v", epURL, b.opt.ConnectTimeout, err), backends.ErrTransient, err)
	}
	if st, _ := statusOf(err); st == 0 && !errors.As(err, &netErr) {
		// An HTTP answer the SDK could not read as OSS's (OSS answers
		// every error with an XML body it parses): a web server, an
		// S3-only store or a proxy's error page.
		return backends.Explain(fmt.Sprintf("OSS endpoint %s does not speak OSS: it answered a bucket listing with something the OSS client cannot read (%v); check the endpoint (--oss-endpoint, OSS_ENDPOINT or the URI)", epURL, err), backends.ErrInvalid, err)
	}
	return b.wrapErr("list", "", err)
}

// ID implements backends.Backend.
func (b *Backend) ID() string { return b.id }

// Close implements backends.Backend. The SDK keeps no background work of
// its own; the idle connections to the endpoint (a socket and two
// goroutines each) are closed here.
func (b *Backend) Close() error {
	b.hc.CloseIdleConnections()
	return nil
}

func (b *Backend) object(key string) string { return b.prefix + key }

// head returns the headers of one object.
func (b *Backend) head(ctx context.Context, key string) (http.Header, error) {
	var h http.Header
	err := b.retry(ctx, func() error {
		var err error
		h, err = b.bucket.GetObjectDetailedMeta(b.object(key), alioss.WithContext(ctx))
		if err == nil && h.Get("ETag") == "" {
			// OSS always sends one: this response was cut short.
			return fmt.Errorf("HEAD response without ETag: %w", errTruncated)
		}
		return err
	})
	return h, err
}

func infoFromHeader(key string, h http.Header) backends.ObjectInfo {
	size, _ := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	mt, _ := http.ParseTime(h.Get("Last-Modified"))
	return backends.ObjectInfo{Key: key, Size: size, ModTime: mt, Version: strings.Trim(h.Get("ETag"), `"`), Mode: 0o644}
}

func isNotFound(err error) bool {
	st, code := statusOf(err)
	return st == http.StatusNotFound && code != "NoSuchBucket"
}

// dirStore is the OSS API's side of prefixdirs: HEAD, ListObjectsV2,
// symlink objects, DeleteObject and marker PUTs.
type dirStore struct{ b *Backend }

// Head implements prefixdirs.Store.
func (d dirStore) Head(ctx context.Context, key string) (backends.ObjectInfo, error) {
	h, err := d.b.head(ctx, key)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	return infoFromHeader(key, h), nil
}

// NotFound implements prefixdirs.Store.
func (d dirStore) NotFound(err error) bool { return isNotFound(err) }

// Wrap implements prefixdirs.Store.
func (d dirStore) Wrap(op, key string, err error) error { return d.b.wrapErr(op, key, err) }

// ReadLink implements prefixdirs.LinkReader.
func (d dirStore) ReadLink(ctx context.Context, key string) (string, error) {
	return d.b.readLink(ctx, key)
}

// ListPage implements prefixdirs.Store.
func (d dirStore) ListPage(ctx context.Context, prefix, delim, token, startAfter string, max int) (prefixdirs.Page, error) {
	res, err := d.b.listRaw(ctx, prefix, delim, token, startAfter, max)
	if err != nil {
		return prefixdirs.Page{}, err
	}
	page := prefixdirs.Page{Entries: make([]prefixdirs.Entry, len(res.Objects)), Prefixes: res.CommonPrefixes,
		Truncated: res.IsTruncated, NextToken: res.NextContinuationToken}
	for i, o := range res.Objects {
		page.Entries[i] = prefixdirs.Entry{Name: o.Key, Size: o.Size, ModTime: o.LastModified, ETag: strings.Trim(o.ETag, `"`), Link: o.Type == ossSymlinkType}
	}
	return page, nil
}

// Delete implements prefixdirs.Store.
func (d dirStore) Delete(ctx context.Context, name string) error { return d.b.deleteObject(ctx, name) }

// PutMarker implements prefixdirs.Store.
func (d dirStore) PutMarker(ctx context.Context, name string) error {
	return d.b.retry(ctx, func() error {
		return d.b.bucket.PutObject(name, bytes.NewReader(nil), alioss.WithContext(ctx))
	})
}

// listRaw lists one page of objects under prefix. startAfter (a full
// object name) counts only when token is "": a token lies beyond it.
func (b *Backend) listRaw(ctx context.Context, prefix, delim, token, startAfter string, max int) (alioss.ListObjectsResultV2, error) {
	var res alioss.ListObjectsResultV2
	opts := []alioss.Option{alioss.Prefix(prefix), alioss.MaxKeys(max), alioss.WithContext(ctx)}
	if delim != "" {
		opts = append(opts, alioss.Delimiter(delim))
	}
	if token != "" {
		opts = append(opts, alioss.ContinuationToken(token))
	} else if startAfter != "" {
		opts = append(opts, alioss.StartAfter(startAfter))
	}
	err := b.retry(ctx, func() error {
		var err error
		res, err = b.bucket.ListObjectsV2(opts...)
		return err
	})
	return res, err
}

func (b *Backend) deleteObject(ctx context.Context, name string) error {
	return b.retry(ctx, func() error {
		return b.bucket.DeleteObject(name, alioss.WithContext(ctx))
	})
}

// Copy implements backends.Copier with a server-side copy.
func (b *Backend) Copy(ctx context.Context, from, to string) (backends.ObjectInfo, error) {
	err := b.retry(ctx, func() error {
		_, err := b.bucket.CopyObject(b.object(from), b.object(to), alioss.WithContext(ctx))
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, b.wrapErr("copy", from, err)
	}
	return b.Stat(ctx, to)
}

// now is the clock used for ModTime when the server sends no Date.
func now() time.Time { return time.Now() }
