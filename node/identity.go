package node

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aliyun/credentials-go/credentials/providers"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/backends/oss"
)

// IdentitySettings say where the node exchanges a pod's service-account
// token for keys (node-wide: a mount request may not send a pod's token
// elsewhere).
type IdentitySettings struct {
	// OSSSTSEndpoint is the Alibaba Cloud STS host of AssumeRoleWithOIDC
	// ("": credentials-go's default, sts.aliyuncs.com or the one
	// $ALIBABA_CLOUD_STS_REGION names). It is always reached over HTTPS.
	OSSSTSEndpoint string
	// S3STSEndpoint is the AWS STS endpoint URL of
	// AssumeRoleWithWebIdentity ("": the SDK's, for the S3 region).
	S3STSEndpoint string
}

// roleSessionDuration is how long keys obtained for a role are asked to
// live; they are refreshed before they expire (an STS may grant less).
const roleSessionDuration = time.Hour

// identity is the live credentials of one mount: its backend asks it for
// keys (it caches them until shortly before they expire) and a republish
// of the mount brings it a fresh token or rotated keys (update). A role
// is assumed with the mount's own token only: never with the node's.
type identity struct {
	set    IdentitySettings
	region string // of the S3 STS
	name   string // the role session name: names the mount in the store's audit log

	mu  sync.Mutex
	cur Credentials // GUARDED_BY(mu)
	// ossRole assumes cur's OSS role with cur's token; rebuilt when the
	// token changes. GUARDED_BY(mu), and its calls too (it is not safe
	// for concurrent use).
	ossRole *providers.OIDCCredentialsProvider
	// s3Role caches the keys of cur's S3 role; its token retriever reads
	// cur, and a new token invalidates it.
	s3Role *aws.CredentialsCache
}

func newIdentity(c Credentials, set IdentitySettings, region, target string) (*identity, error) {
	id := &identity{set: set, region: region, name: sessionName(target)}
	if err := id.update(c); err != nil {
		return nil, err
	}
	return id, nil
}

// earlier has keys refreshed with a fifth of their life left (12 min of
// an hour, 12 s of a minute, whatever the STS granted), so that no
// request in flight is signed with keys about to expire. A fixed window
// would refresh at every request keys that live less than it.
type earlier struct{ p aws.CredentialsProvider }

// Retrieve implements aws.CredentialsProvider.
func (e earlier) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := e.p.Retrieve(ctx)
	if err == nil && c.CanExpire {
		now := time.Now()
		c.Expires = now.Add(c.Expires.Sub(now) * 4 / 5)
	}
	return c, err
}

// sessionName makes a role session name of a mount target (the pod's
// volume path holds its UID): 2 to 64 of [\w+=,.@-].
func sessionName(target string) string {
	var b strings.Builder
	b.WriteString("mlfsd")
	for _, r := range target {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("+=,.@-_", r):
			b.WriteRune(r)
		default:
			b.WriteByte('.')
		}
	}
	s := b.String()
	if len(s) > 64 {
		s = "mlfsd" + s[len(s)-59:] // the end of the path is the pod's own part
	}
	return s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// update replaces the credentials with c: rotated keys are used at once;
// a role, a provider or a token that changed is assumed again at the next
// request (check does at once).
func (id *identity) update(c Credentials) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	old := id.cur
	switch {
	case c.OSSRoleARN == "":
		id.ossRole = nil
	case id.ossRole == nil || c.OSSRoleARN != old.OSSRoleARN || c.OSSOIDCProviderARN != old.OSSOIDCProviderARN || c.OSSOIDCToken != old.OSSOIDCToken:
		b := providers.NewOIDCCredentialsProviderBuilder().
			WithRoleArn(c.OSSRoleARN).
			WithOIDCProviderARN(c.OSSOIDCProviderARN).
			WithOIDCToken(c.OSSOIDCToken).
			WithRoleSessionName(id.name).
			WithDurationSeconds(int(roleSessionDuration / time.Second))
		if id.set.OSSSTSEndpoint != "" {
			b = b.WithSTSEndpoint(id.set.OSSSTSEndpoint)
		}
		p, err := b.Build()
		if err != nil {
			return fmt.Errorf("OSS role %s: %v", c.OSSRoleARN, err)
		}
		id.ossRole = p
	}
	switch {
	case c.S3RoleARN == "":
		id.s3Role = nil
	case id.s3Role == nil || c.S3RoleARN != old.S3RoleARN:
		client := sts.New(sts.Options{Region: id.region, BaseEndpoint: nonEmpty(id.set.S3STSEndpoint)})
		p := stscreds.NewWebIdentityRoleProvider(client, c.S3RoleARN, tokenFunc(id.s3Token), func(o *stscreds.WebIdentityRoleOptions) {
			o.RoleSessionName = id.name
			o.Duration = roleSessionDuration
		})
		id.s3Role = aws.NewCredentialsCache(earlier{p})
	case c.S3WebIdentityToken != old.S3WebIdentityToken:
		id.s3Role.Invalidate()
	}
	id.cur = c
	return nil
}

// current returns the credentials as last given.
func (id *identity) current() Credentials {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.cur
}

// ossKeys returns the OSS keys to sign with: the given ones, or the
// role's (assumed again when they near their expiry or the token changed).
func (id *identity) ossKeys() (oss.Credentials, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	c := id.cur
	if c.OSSRoleARN == "" {
		return oss.Credentials{AccessKeyID: c.OSSAccessKeyID, AccessKeySecret: c.OSSAccessKeySecret, SecurityToken: c.OSSSecurityToken}, nil
	}
	k, err := id.ossRole.GetCredentials()
	if err != nil {
		return oss.Credentials{}, stsError("OSS", "AssumeRoleWithOIDC", c.OSSRoleARN, id.ossSTS(), err)
	}
	return oss.Credentials{AccessKeyID: k.AccessKeyId, AccessKeySecret: k.AccessKeySecret, SecurityToken: k.SecurityToken}, nil
}

// ossProvider is an identity as the OSS backend asks for keys: a
// credentials-go provider.
type ossProvider struct{ id *identity }

// GetCredentials implements providers.CredentialsProvider.
func (p ossProvider) GetCredentials() (*providers.Credentials, error) {
	k, err := p.id.ossKeys()
	if err != nil {
		return nil, err
	}
	return &providers.Credentials{AccessKeyId: k.AccessKeyID, AccessKeySecret: k.AccessKeySecret, SecurityToken: k.SecurityToken, ProviderName: p.GetProviderName()}, nil
}

// GetProviderName implements providers.CredentialsProvider: where the
// keys come from, in the backend's errors.
func (p ossProvider) GetProviderName() string {
	if p.id.current().OSSRoleARN != "" {
		return "mount request (OIDC role)"
	}
	return "mount request"
}

func (id *identity) ossSTS() string {
	if id.set.OSSSTSEndpoint != "" {
		return id.set.OSSSTSEndpoint
	}
	if r := os.Getenv("ALIBABA_CLOUD_STS_REGION"); r != "" {
		return "sts." + r + ".aliyuncs.com"
	}
	return "sts.aliyuncs.com"
}

// Retrieve implements aws.CredentialsProvider: the S3 keys to sign with.
func (id *identity) Retrieve(ctx context.Context) (aws.Credentials, error) {
	id.mu.Lock()
	c, role := id.cur, id.s3Role
	id.mu.Unlock()
	if role == nil {
		return aws.Credentials{AccessKeyID: c.S3AccessKeyID, SecretAccessKey: c.S3SecretAccessKey, SessionToken: c.S3SessionToken, Source: "mlfsd mount request"}, nil
	}
	k, err := role.Retrieve(ctx)
	if err != nil {
		ep := id.set.S3STSEndpoint
		if ep == "" {
			ep = "sts." + id.region + ".amazonaws.com"
		}
		return aws.Credentials{}, stsError("S3", "AssumeRoleWithWebIdentity", c.S3RoleARN, ep, err)
	}
	return k, nil
}

func (id *identity) s3Token() ([]byte, error) {
	t := id.current().S3WebIdentityToken
	if t == "" {
		return nil, errors.New("no web identity token")
	}
	return []byte(t), nil
}

// tokenFunc is a stscreds.IdentityTokenRetriever.
type tokenFunc func() ([]byte, error)

// GetIdentityToken implements stscreds.IdentityTokenRetriever.
func (f tokenFunc) GetIdentityToken() ([]byte, error) { return f() }

// stsError names the store, the call, the role and the STS endpoint; the
// token it was called with never appears (an STS answer does not echo it,
// and a URL error's query is cut).
func stsError(store, call, role, endpoint string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = fmt.Errorf("%s %s: %w", ue.Op, strings.SplitN(ue.URL, "?", 2)[0], ue.Err)
	}
	return fmt.Errorf("%s credentials: %s for role %s at STS %s: %v", store, call, role, endpoint, err)
}

// check obtains keys for the role of the store of scheme now, if there is
// one, so that a mount or a republish with a token the STS refuses fails
// at once, saying why.
func (id *identity) check(ctx context.Context, scheme string) error {
	c := id.current()
	var errs []error
	if c.OSSRoleARN != "" && scheme == backends.SchemeOSS {
		if _, err := id.ossKeys(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.S3RoleARN != "" && scheme == backends.SchemeS3 {
		if _, err := id.Retrieve(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// applyTo maps the credentials a mount brought to its backend options: the
// one place that knows which backend option each row of the table feeds.
// Fields not given leave the node's own configuration in place.
func (id *identity) applyTo(opt all.Options) all.Options {
	c := id.current()
	if c.OSSAccessKeyID != "" || c.OSSRoleARN != "" {
		opt.OSS.CredentialsProvider = ossProvider{id}
	}
	if c.S3AccessKeyID != "" || c.S3RoleARN != "" {
		opt.S3.CredentialsProvider = id
	}
	if c.HDFSUser != "" {
		opt.HDFS.User = c.HDFSUser
	}
	if c.HDFSKeytab != "" {
		// Validated when the request arrived (Validate): the mount's own
		// principal and keytab, never the node's keytab file or cache.
		kt, _ := base64.StdEncoding.DecodeString(c.HDFSKeytab)
		opt.HDFS.Kerberos.Keytab = kt
		opt.HDFS.Kerberos.KeytabFile = ""
		opt.HDFS.Kerberos.CCacheFile = ""
		opt.HDFS.Kerberos.Principal = c.HDFSPrincipal
	}
	return opt
}

// s3Region is the region of u's S3 STS: the URI's, the mount's option, the
// environment's, else us-east-1 (as the S3 backend resolves its own).
func s3Region(u backends.URI, set Settings) string {
	for _, r := range []string{u.Region, set.Backend.S3.Region, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION")} {
		if r != "" {
			return r
		}
	}
	return "us-east-1"
}

// backendFor opens (or shares) the backend of a mount of req. A request
// without credentials shares the node's own; one with credentials gets
// its own identity (keys obtained now, so that a refused token fails the
// mount) and a backend no other mount shares: a pod's token is used for
// that pod's mount only.
func (n *Node) backendFor(ctx context.Context, u backends.URI, set Settings, req MountRequest, check bool) (b backends.Backend, key string, release func(), id *identity, err error) {
	if req.Credentials.IsZero() {
		b, key, release, err = n.pool.acquire(ctx, u, set.Backend, "node")
		return b, key, release, nil, err
	}
	if err := req.Credentials.Validate(); err != nil {
		return nil, "", nil, nil, err
	}
	id, err = newIdentity(req.Credentials, set.Identity, s3Region(u, set), req.Target)
	if err != nil {
		return nil, "", nil, nil, err
	}
	if check {
		if err := id.check(ctx, u.Scheme); err != nil {
			return nil, "", nil, nil, err
		}
	}
	b, key, release, err = n.pool.acquire(ctx, u, id.applyTo(set.Backend), fmt.Sprintf("identity %p", id))
	return b, key, release, id, err
}

// refresh gives live mount m the credentials of a republish: a fresh
// token, rotated keys, or (a Secret changed) another key. Keys for the
// mount's role are obtained with them at once; if the STS refuses, the
// mount keeps the credentials it had and the error says why.
func (m *mount) refresh(ctx context.Context, c Credentials, log *slog.Logger) error {
	m.refreshing.Lock()
	defer m.refreshing.Unlock()
	old := m.id.current()
	if old.fingerprint() == c.fingerprint() {
		return nil
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := m.id.update(c); err != nil {
		return err
	}
	err := m.id.check(ctx, m.scheme())
	if err == nil && m.probe != nil {
		// The store's own word on the new keys (a role's or given ones):
		// a mount is not left on keys it refuses.
		if perr := m.probe(ctx); perr != nil {
			err = fmt.Errorf("the store refused them: %w", perr)
		}
	}
	if err != nil {
		if rerr := m.id.update(old); rerr != nil {
			return errors.Join(err, rerr)
		}
		return fmt.Errorf("refresh the credentials of %s: %w (it keeps the ones it had)", m.req.Target, err)
	}
	if sameIdentity(old, c) {
		log.Info("credentials refreshed", "mountpoint", m.req.Target, "credentials", c)
	} else {
		log.Warn("credentials replaced by another identity", "mountpoint", m.req.Target, "was", old, "now", c)
	}
	return nil
}

// credentials returns what m runs on, as last given.
func (m *mount) credentials() Credentials {
	if m.id == nil {
		return Credentials{}
	}
	return m.id.current()
}

// BackendOptions returns opt with c applied, for a caller that opens a
// store outside a mount (the CSI controller creating a volume's prefix):
// the same mapping of the credentials table as a mount's, keys for a role
// obtained now (and refreshed for as long as the backend lives).
func BackendOptions(ctx context.Context, c Credentials, u backends.URI, opt all.Options, set IdentitySettings) (all.Options, error) {
	if c.IsZero() {
		return opt, nil
	}
	if err := c.Validate(); err != nil {
		return opt, err
	}
	s := Settings{Backend: opt}
	id, err := newIdentity(c, set, s3Region(u, s), "controller")
	if err != nil {
		return opt, err
	}
	if err := id.check(ctx, u.Scheme); err != nil {
		return opt, err
	}
	return id.applyTo(opt), nil
}

// scheme is the scheme of m's store.
func (m *mount) scheme() string {
	u, err := backends.ParseURI(m.req.URI)
	if err != nil {
		return "" // it was parsed when mounted
	}
	return u.Scheme
}

// probeOf returns a probe of b: one entry of its root listed.
func probeOf(b backends.Backend) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := b.List(ctx, backends.ListOptions{MaxKeys: 1})
		return err
	}
}
