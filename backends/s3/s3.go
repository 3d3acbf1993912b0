// Package s3 is the mlfsd backend for s3:// URIs, over the AWS SDK for Go
// v2 (github.com/aws/aws-sdk-go-v2/service/s3): AWS S3, S3 Express One
// Zone directory buckets, and S3-compatible stores (MinIO, SeaweedFS,
// Ceph RGW, the S3 face of `mlfsd emulate oss`).
//
// Keys map to object names under the URI's prefix. Versions are ETags.
// Reads are ranged GETs that resume after a failure from where they stopped
// (pinned to the ETag first seen, with If-Match). Writes go up as one PUT
// when small, or as a streaming multipart upload with parallel parts;
// nothing is visible before Commit. Every request is retried here (see
// RetryOptions). Directories are prefixes; MakeDir writes "key/" marker
// objects. WriteExclusive is a PUT with If-None-Match: *.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/objstore"
	"github.com/mlfsd/mlfsd/backends/prefixdirs"
)

// Options configures the backend. Zero values take the defaults noted.
// Secrets are not options: they come from the environment or a file.
type Options struct {
	// Endpoint is used when the URI has no endpoint= parameter;
	// AWS_ENDPOINT_URL_S3 and then AWS_ENDPOINT_URL are the fallbacks, and
	// AWS S3 itself the default. Examples: http://minio.storage.svc:9000,
	// 10.0.0.5:8333 (an IP address or localhost without a scheme gets
	// http://, any other host https://).
	Endpoint string
	// Region is used when the URI has no region= parameter; AWS_REGION,
	// AWS_DEFAULT_REGION, then us-east-1 are the fallbacks.
	Region string
	// PathStyle ("true" or "false") is used when the URI has no
	// path_style= parameter. Default: path style with an Endpoint (what
	// in-cluster stores serve without wildcard DNS), virtual-hosted style
	// on AWS (which S3 Express directory buckets require).
	PathStyle string
	// CredentialsFile, when set, is the AWS shared credentials file the
	// SDK's default chain reads instead of ~/.aws/credentials (or
	// $AWS_SHARED_CREDENTIALS_FILE); it must not be accessible by group
	// or others. The chain (ChainSources) resolves the keys: the AWS_*
	// environment, the profile ($AWS_PROFILE, or the URI's profile=),
	// web identity, container credentials, instance metadata.
	CredentialsFile string
	// CredentialsProvider, when set, signs every request instead of the
	// default chain (a node daemon mounting with its client's keys).
	// Not marshalled: a provider is code, not configuration.
	CredentialsProvider aws.CredentialsProvider `json:"-"`
	// loadOptions, in tests, add to the default chain's configuration.
	loadOptions []func(*config.LoadOptions) error
	// MultipartThreshold: writes larger than this use a multipart upload
	// (default 16 MiB); smaller ones are one PUT.
	MultipartThreshold int64
	// PartSize is the size of multipart parts (default 8 MiB, at least
	// 5 MiB as S3 requires); it grows for very large objects to stay
	// within 10000 parts.
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
	// UploadChecksums says whether writes carry a CRC-32 the store checks
	// and keeps (x-amz-checksum-crc32, in a header or an aws-chunked
	// trailer), and whole-object reads check the checksum the store kept:
	// "crc32", "off", or "" for the default, crc32 on AWS and off with an
	// Endpoint. Off, the body is still checked in transit (by
	// the SigV4 payload hash over http, by TLS over https); what it spares
	// is the aws-chunked trailer encoding the SDK uses over https, which
	// S3-compatible stores older than the SDK's 2025 default refuse.
	UploadChecksums string
	// Retry bounds retries of every call.
	Retry RetryOptions
	// tlsConfig, in tests, trusts a test server's certificate.
	tlsConfig *tls.Config
	// ConnectTimeout bounds the first contact, in New (connecting and a
	// first answer, retries included), and every TCP connect and TLS
	// handshake after it (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a response's headers once a
	// request is sent, and any read or write on a connection that makes no
	// progress (default DefaultResponseTimeout): a store that stops
	// answering, even in the middle of a body, is retried instead of
	// holding a reader forever.
	ResponseTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultConnectTimeout  = objstore.DefaultConnectTimeout
	DefaultResponseTimeout = 120 * time.Second
)

// MinPartSize is the smallest multipart part S3 takes (but the last).
const MinPartSize = 5 << 20

const (
	maxPartSize  = objstore.MaxPartSize
	maxParts     = objstore.MaxParts
	listPageSize = 1000
	// maxKeyBytes is S3's limit on an object key.
	maxKeyBytes = 1024
)

// store is S3's part of the options' validation.
var store = objstore.Store{Name: "S3", MinPartSize: MinPartSize, MinPartSizeText: "5 MiB"}

// withDefaults fills and checks the options: S3's own (the response
// timeout, checksums), then those every object store has
// (objstore.Store.Apply).
func (o Options) withDefaults() (Options, error) {
	if o.ResponseTimeout == 0 {
		o.ResponseTimeout = DefaultResponseTimeout
	}
	if o.ConnectTimeout < 0 || o.ResponseTimeout < 0 {
		return o, fmt.Errorf("S3 timeouts %v, %v: want positive durations", o.ConnectTimeout, o.ResponseTimeout)
	}
	err := store.Apply(objstore.Transfer{
		MultipartThreshold: &o.MultipartThreshold, PartSize: &o.PartSize,
		Concurrency: &o.Concurrency, StagedConcurrency: &o.StagedConcurrency,
		ConnectTimeout: &o.ConnectTimeout, Retry: &o.Retry,
	})
	if err == nil && o.UploadChecksums != "" && o.UploadChecksums != "crc32" && o.UploadChecksums != "off" {
		err = fmt.Errorf("S3 upload checksums %q: want crc32 or off", o.UploadChecksums)
	}
	return o, err
}

// Backend is an S3 bucket prefix.
type Backend struct {
	prefixdirs.Dirs // Stat, List, Delete, MakeDir: the bucket's directory view under prefix

	client *s3.Client
	bucket string
	prefix string // "" or ending in '/'
	id     string
	ep     endpoint
	opt    Options
	log    *slog.Logger
	cond   conditional
	// creds sign every request; credSource says where they come from.
	creds      aws.CredentialsProvider
	credSource string
	// copyLimit: larger objects are copied in parts (CopyObject's 5 GiB;
	// tests lower it).
	copyLimit int64
}

var (
	_ backends.Backend         = (*Backend)(nil)
	_ backends.Copier          = (*Backend)(nil)
	_ backends.DirMaker        = (*Backend)(nil)
	_ backends.ExclusiveWriter = (*Backend)(nil)
	_ backends.UploadAborter   = (*Backend)(nil)
	_ backends.NameLimiter     = (*Backend)(nil)
)

// New opens the backend rooted at the directory URI u. It checks that the
// bucket exists and that the credentials may list it, so a wrong endpoint,
// bucket or key fails here, with a message that says what to fix.
func New(ctx context.Context, u backends.URI, opt Options, log *slog.Logger) (backends.Backend, error) {
	if u.Scheme != backends.SchemeS3 {
		return nil, fmt.Errorf("s3 backend: URI scheme %q is not s3", u.Scheme)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	ep, err := resolveEndpoint(u.Endpoint, opt.Endpoint, u.Region, opt.Region, u.PathStyle, opt.PathStyle)
	if err != nil {
		return nil, err
	}
	creds, credSource, err := newCredentials(ctx, opt, ep.region, u.Profile)
	if err != nil {
		return nil, err
	}
	credCtx, cancelCred := context.WithTimeout(ctx, opt.ConnectTimeout)
	credSource, err = checkCredentials(credCtx, creds, credSource)
	cancelCred()
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: opt.ConnectTimeout, KeepAlive: 30 * time.Second}
	hc := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, timeout: opt.ResponseTimeout}, nil
		},
		TLSHandshakeTimeout:   opt.ConnectTimeout,
		TLSClientConfig:       opt.tlsConfig,
		ResponseHeaderTimeout: opt.ResponseTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
	}}
	so := s3.Options{
		Region:       ep.region,
		Credentials:  creds,
		HTTPClient:   hc,
		UsePathStyle: ep.pathStyle,
		Retryer:      aws.NopRetryer{},
		// Whole-object GETs are checked against the checksum the store
		// kept, when it kept one; a store that kept none is not an
		// event worth a log line per read.
		DisableLogOutputChecksumValidationSkipped: true,
	}
	if ep.url != "" {
		so.BaseEndpoint = aws.String(ep.url)
	}
	// Set either way: left unset (s3.New, unlike NewFromConfig, resolves
	// no default), the SDK would send no checksum at all.
	so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported
	so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenSupported
	if opt.UploadChecksums == "off" || opt.UploadChecksums == "" && ep.url != "" {
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	idURI := backends.URI{Scheme: backends.SchemeS3, Bucket: u.Bucket, Path: u.Path, Endpoint: ep.host}
	b := &Backend{client: s3.New(so), bucket: u.Bucket, prefix: prefix, id: idURI.String(), ep: ep, opt: opt, log: log, copyLimit: maxPartSize,
		creds: creds, credSource: credSource}
	b.Dirs = prefixdirs.NewDirs(prefixdirs.Namespace{Store: dirStore{b}, Prefix: prefix, PageSize: listPageSize, Truncated: errTruncated})
	// Probe: one listing of the prefix proves bucket, endpoint and key.
	// It is the first contact, bounded by ConnectTimeout.
	probeCtx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	_, err = b.listRaw(probeCtx, prefix, "", "", "", 1)
	switch {
	case err == nil:
	case ctx.Err() == nil && errors.Is(err, syscall.ECONNREFUSED):
		return nil, backends.Explain(fmt.Sprintf("S3 endpoint %s refused the connection: nothing listens there; check the endpoint (--s3-endpoint, AWS_ENDPOINT_URL or the URI) and that the server is up", b.where()), backends.ErrTransient, err)
	case ctx.Err() == nil && probeCtx.Err() != nil:
		return nil, backends.Explain(fmt.Sprintf("S3 endpoint %s did not answer within %v (connect timeout; is it the right endpoint, and reachable?): %v", b.where(), opt.ConnectTimeout, err), backends.ErrTransient, err)
	default:
		return nil, b.wrapErr("list", "", err)
	}
	log.Debug("s3 backend opened", "uri", b.id, "path_style", ep.pathStyle, "region", ep.region, "credentials", credSource)
	return b, nil
}

// idleConn fails a read or write that makes no progress for timeout: a
// store that stops sending in the middle of a body would otherwise hold a
// reader forever (the transport bounds only the wait for headers). The
// failed read is then resumed, like any cut body, by the reader's retries.
type idleConn struct {
	net.Conn
	timeout time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(p)
}

// Write pushes the read deadline too: while a body goes up, the
// transport's reader waits for the response, and the wait counts from the
// last byte sent (as ResponseHeaderTimeout does), not from the first.
func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}

// ID implements backends.Backend: the bucket, prefix and endpoint host.
func (b *Backend) ID() string { return b.id }

// Close implements backends.Backend, closing idle connections.
func (b *Backend) Close() error {
	if t, ok := b.client.Options().HTTPClient.(*http.Client); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// NameLimits implements backends.NameLimiter: keys of at most 1024 bytes,
// the channel's prefix included; no per-component limit.
func (b *Backend) NameLimits() (component, key int) {
	return 0, maxKeyBytes - len(b.prefix)
}

func (b *Backend) object(key string) string { return b.prefix + key }

// respDate returns the Date header of an SDK response (the time the store
// accepted a write), or now.
func respDate(md middleware.Metadata) time.Time {
	if r, ok := awsmw.GetRawResponse(md).(*smithyhttp.Response); ok {
		if t, err := http.ParseTime(r.Header.Get("Date")); err == nil {
			return t
		}
	}
	return time.Now().Truncate(time.Second)
}

func etagOf(p *string) string { return strings.Trim(aws.ToString(p), `"`) }

func isNotFound(err error) bool {
	st, code := statusOf(err)
	return st == http.StatusNotFound && code != "NoSuchBucket"
}

func (b *Backend) head(ctx context.Context, key string) (*s3.HeadObjectOutput, error) {
	var out *s3.HeadObjectOutput
	err := b.retry(ctx, func() error {
		var err error
		out, err = b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: aws.String(b.object(key))})
		if err == nil && etagOf(out.ETag) == "" {
			return fmt.Errorf("HEAD response without ETag: %w", errTruncated)
		}
		return err
	})
	return out, err
}

// dirStore is the S3 API's side of prefixdirs: HEAD, ListObjectsV2,
// DeleteObject and marker PUTs.
type dirStore struct{ b *Backend }

// Head implements prefixdirs.Store.
func (d dirStore) Head(ctx context.Context, key string) (backends.ObjectInfo, error) {
	h, err := d.b.head(ctx, key)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	return backends.ObjectInfo{Key: key, Size: aws.ToInt64(h.ContentLength), ModTime: aws.ToTime(h.LastModified),
		Version: etagOf(h.ETag), Mode: 0o644}, nil
}

// NotFound implements prefixdirs.Store.
func (d dirStore) NotFound(err error) bool { return isNotFound(err) }

// Wrap implements prefixdirs.Store.
func (d dirStore) Wrap(op, key string, err error) error { return d.b.wrapErr(op, key, err) }

// ListPage implements prefixdirs.Store.
func (d dirStore) ListPage(ctx context.Context, prefix, delim, token, startAfter string, max int) (prefixdirs.Page, error) {
	res, err := d.b.listRaw(ctx, prefix, delim, token, startAfter, max)
	if err != nil {
		return prefixdirs.Page{}, err
	}
	page := prefixdirs.Page{Entries: make([]prefixdirs.Entry, len(res.Contents)), Truncated: aws.ToBool(res.IsTruncated),
		NextToken: aws.ToString(res.NextContinuationToken)}
	for i, o := range res.Contents {
		page.Entries[i] = prefixdirs.Entry{Name: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified), ETag: etagOf(o.ETag)}
	}
	for _, p := range res.CommonPrefixes {
		page.Prefixes = append(page.Prefixes, aws.ToString(p.Prefix))
	}
	return page, nil
}

// Delete implements prefixdirs.Store.
func (d dirStore) Delete(ctx context.Context, name string) error { return d.b.deleteObject(ctx, name) }

// PutMarker implements prefixdirs.Store.
func (d dirStore) PutMarker(ctx context.Context, name string) error {
	return d.b.retry(ctx, func() error {
		_, err := d.b.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &d.b.bucket, Key: aws.String(name), Body: bytes.NewReader(nil), ContentLength: aws.Int64(0)})
		return err
	})
}

// listRaw lists one page, with its keys and prefixes decoded: they are
// asked for URL-encoded (encoding-type=url), since XML 1.0 cannot carry
// every byte a key may hold (control characters), and the SDK does not
// decode them. startAfter (an object name) counts only when token is "":
// a token lies beyond it.
func (b *Backend) listRaw(ctx context.Context, prefix, delim, token, startAfter string, max int) (*s3.ListObjectsV2Output, error) {
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: aws.String(prefix), MaxKeys: aws.Int32(int32(max)), EncodingType: types.EncodingTypeUrl}
	if delim != "" {
		in.Delimiter = aws.String(delim)
	}
	if token != "" {
		in.ContinuationToken = aws.String(token)
	} else if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	var out *s3.ListObjectsV2Output
	err := b.retry(ctx, func() error {
		var err error
		out, err = b.client.ListObjectsV2(ctx, in)
		if err != nil || out.EncodingType != types.EncodingTypeUrl {
			return err // a store that ignored encoding-type sent plain keys
		}
		for i := range out.Contents {
			if out.Contents[i].Key, err = decodeKey(out.Contents[i].Key); err != nil {
				return err
			}
		}
		for i := range out.CommonPrefixes {
			if out.CommonPrefixes[i].Prefix, err = decodeKey(out.CommonPrefixes[i].Prefix); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// decodeKey undoes encoding-type=url ('+' and %20 are spaces).
func decodeKey(k *string) (*string, error) {
	d, err := url.QueryUnescape(aws.ToString(k))
	if err != nil {
		return nil, backends.Wrap("list", aws.ToString(k), backends.ErrInvalid, fmt.Errorf("listing sent a badly encoded key: %w", err))
	}
	return &d, nil
}

func (b *Backend) deleteObject(ctx context.Context, name string) error {
	return b.retry(ctx, func() error {
		_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: aws.String(name)})
		return err
	})
}

// Copy implements backends.Copier with a server-side copy (CopyObject,
// which S3 allows up to 5 GiB; larger objects are copied in parts with
// UploadPartCopy).
func (b *Backend) Copy(ctx context.Context, from, to string) (backends.ObjectInfo, error) {
	src, err := b.Stat(ctx, from)
	if err != nil {
		return backends.ObjectInfo{}, err
	}
	if src.IsDir {
		return backends.ObjectInfo{}, backends.Wrap("copy", from, backends.ErrIsDir, nil)
	}
	source := copySource(b.bucket, b.object(from))
	if src.Size > b.copyLimit {
		return b.copyParts(ctx, from, to, source, src)
	}
	err = b.retry(ctx, func() error {
		_, err := b.client.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &b.bucket, Key: aws.String(b.object(to)),
			CopySource: aws.String(source), CopySourceIfMatch: aws.String(`"` + src.Version + `"`)})
		return err
	})
	if err != nil {
		return backends.ObjectInfo{}, b.wrapErr("copy", from, err)
	}
	return b.Stat(ctx, to)
}

// copySource formats x-amz-copy-source: bucket/key, URL-encoded except for
// the '/'s, with '+' encoded too (some stores read it as a space).
func copySource(bucket, key string) string {
	segs := strings.Split(bucket+"/"+key, "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(s), "+", "%2B")
	}
	return strings.Join(segs, "/")
}
