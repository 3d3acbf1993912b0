package oss

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"

	alioss "github.com/aliyun/aliyun-oss-go-sdk/oss"
	"github.com/aliyun/credentials-go/credentials/providers"
)

// ChainSources names, in the order credentials-go's default chain tries
// them, the sources the backend reads when no key is given, no credentials
// file is set and OSS_ACCESS_KEY_ID is not set.
const ChainSources = "ALIBABA_CLOUD_ACCESS_KEY_ID/SECRET[/SECURITY_TOKEN], OIDC role (ALIBABA_CLOUD_ROLE_ARN, ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE), the aliyun CLI profile (~/.aliyun/config.json), the credentials file (ALIBABA_CLOUD_CREDENTIALS_FILE or ~/.alibabacloud/credentials, ALIBABA_CLOUD_PROFILE), the ECS RAM role (instance metadata), ALIBABA_CLOUD_CREDENTIALS_URI"

// keyPair is one set of credentials as the OSS SDK takes them. String
// hides the secret and the token.
type keyPair struct{ id, secret, token string }

func (k keyPair) GetAccessKeyID() string     { return k.id }
func (k keyPair) GetAccessKeySecret() string { return k.secret }
func (k keyPair) GetSecurityToken() string   { return k.token }
func (k keyPair) String() string             { return "credentials{redacted}" }

// GoString hides the secret from %#v as well.
func (k keyPair) GoString() string { return k.String() }

// credProvider is what the SDK signs each request with: a fixed key, or a
// credentials-go provider asked anew for every request (it renews
// short-lived keys itself, 3 minutes before they expire). It implements
// alioss.CredentialsProviderE, so a source that fails fails the request,
// with the source named, instead of signing with an empty key.
type credProvider struct {
	source string // where the keys come from, for errors and logs

	fixed *keyPair

	// mu serializes calls into p: credentials-go's providers keep their
	// cached keys without a lock of their own.
	mu sync.Mutex
	p  providers.CredentialsProvider
}

var _ alioss.CredentialsProviderE = (*credProvider)(nil)

// refreshes tells whether the keys can change (and an expired-token
// refusal is then worth a retry with the renewed keys).
func (c *credProvider) refreshes() bool { return c.p != nil }

// GetCredentialsE implements alioss.CredentialsProviderE.
func (c *credProvider) GetCredentialsE() (alioss.Credentials, error) {
	k, err := c.get()
	if err != nil {
		return nil, err
	}
	return k, nil
}

// GetCredentials implements alioss.CredentialsProvider (the SDK uses
// GetCredentialsE when it can).
func (c *credProvider) GetCredentials() alioss.Credentials {
	k, _ := c.get()
	return k
}

func (c *credProvider) get() (keyPair, error) {
	if c.fixed != nil {
		return *c.fixed, nil
	}
	c.mu.Lock()
	cc, err := c.p.GetCredentials()
	c.mu.Unlock()
	if err != nil {
		return keyPair{}, &CredentialsError{Source: c.source, Err: err}
	}
	if cc.AccessKeyId == "" || cc.AccessKeySecret == "" {
		return keyPair{}, &CredentialsError{Source: c.source, Err: errors.New("the source gave an empty access key")}
	}
	return keyPair{id: cc.AccessKeyId, secret: cc.AccessKeySecret, token: cc.SecurityToken}, nil
}

// CredentialsError is a failure to obtain keys from a source (an STS
// refusal, unreachable instance metadata, an unreadable profile). It
// names the source; the messages of credentials-go it wraps carry no
// secrets (they name files, URLs and the STS answer).
type CredentialsError struct {
	Source string
	Err    error
}

// Error names the source and what it answered.
func (e *CredentialsError) Error() string {
	return fmt.Sprintf("OSS credentials from %s: %v", e.Source, e.Err)
}

// Unwrap returns the source's own error.
func (e *CredentialsError) Unwrap() error { return e.Err }

// newCredProvider picks the source of the backend's keys, first found:
// opt.CredentialsProvider; opt.Credentials; opt.CredentialsFile;
// OSS_ACCESS_KEY_ID, OSS_ACCESS_KEY_SECRET and OSS_SESSION_TOKEN; else
// credentials-go's default chain (ChainSources).
func newCredProvider(opt Options) (*credProvider, error) {
	switch {
	case opt.CredentialsProvider != nil:
		return &credProvider{source: "the given " + opt.CredentialsProvider.GetProviderName() + " provider", p: opt.CredentialsProvider}, nil
	case opt.Credentials != nil:
		g := opt.Credentials
		if g.AccessKeyID == "" || g.AccessKeySecret == "" {
			return nil, errors.New("OSS credentials given without an access key ID and secret")
		}
		return &credProvider{source: "the given key", fixed: &keyPair{g.AccessKeyID, g.AccessKeySecret, g.SecurityToken}}, nil
	case opt.CredentialsFile != "":
		c, err := readCredentialsFile(opt.CredentialsFile)
		if err != nil {
			return nil, err
		}
		return &credProvider{source: "credentials file " + opt.CredentialsFile, fixed: &keyPair{c.id, c.secret, c.token}}, nil
	}
	if id, secret := os.Getenv("OSS_ACCESS_KEY_ID"), os.Getenv("OSS_ACCESS_KEY_SECRET"); id != "" || secret != "" {
		if id == "" || secret == "" {
			return nil, errors.New("OSS credentials from the environment: OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET must be set together")
		}
		return &credProvider{source: "OSS_ACCESS_KEY_ID", fixed: &keyPair{id, secret, os.Getenv("OSS_SESSION_TOKEN")}}, nil
	}
	return &credProvider{source: "the Alibaba Cloud default chain", p: newDefaultChain()}, nil
}

// chainSource is one source of the default chain, with the name its
// errors carry.
type chainSource struct {
	name string
	p    providers.CredentialsProvider
	// hide are strings (a URL's query, its user info) that could hold a
	// token and that errors quote: they are cut from them.
	hide []string
}

// errorf wraps err with the source's name, cut of what it must hide.
func (s *chainSource) errorf(err error) string {
	msg := err.Error()
	for _, h := range s.hide {
		if h != "" {
			msg = strings.ReplaceAll(msg, h, "REDACTED")
		}
	}
	return s.name + ": " + msg
}

// defaultChain is credentials-go's default chain
// (providers.NewDefaultCredentialsProvider), source for source and in its
// order, sticking as it does to the first source that gave a key; what it
// adds is errors that name each source and what it was configured with.
type defaultChain struct {
	sources []chainSource
	used    *chainSource
}

func newDefaultChain() *defaultChain {
	c := &defaultChain{}
	add := func(name string, p providers.CredentialsProvider, err error, hide ...string) {
		if err == nil {
			c.sources = append(c.sources, chainSource{name: name, p: p, hide: hide})
		}
	}
	env, err := providers.NewEnvironmentVariableCredentialsProviderBuilder().Build()
	add("environment (ALIBABA_CLOUD_ACCESS_KEY_ID)", env, err)
	oidc, err := providers.NewOIDCCredentialsProviderBuilder().Build()
	add(fmt.Sprintf("OIDC role %s (ALIBABA_CLOUD_ROLE_ARN, token file %s)", os.Getenv("ALIBABA_CLOUD_ROLE_ARN"), os.Getenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE")), oidc, err)
	cli, err := providers.NewCLIProfileCredentialsProviderBuilder().Build()
	add("aliyun CLI profile (ALIBABA_CLOUD_CONFIG_FILE or ~/.aliyun/config.json)", cli, err)
	prof, err := providers.NewProfileCredentialsProviderBuilder().Build()
	add(fmt.Sprintf("credentials file %s, profile %s", firstOf(os.Getenv("ALIBABA_CLOUD_CREDENTIALS_FILE"), "~/.alibabacloud/credentials"), firstOf(os.Getenv("ALIBABA_CLOUD_PROFILE"), "default")), prof, err)
	ecs, err := providers.NewECSRAMRoleCredentialsProviderBuilder().Build()
	add("ECS RAM role (instance metadata at 100.100.100.200)", ecs, err)
	if u := os.Getenv("ALIBABA_CLOUD_CREDENTIALS_URI"); u != "" {
		uri, err := providers.NewURLCredentialsProviderBuilder().Build()
		var hide []string
		if pu, perr := url.Parse(u); perr == nil {
			hide = append(hide, pu.RawQuery, pu.User.String(), url.QueryEscape(pu.RawQuery))
		}
		add("credentials URI "+redactURL(u)+" (ALIBABA_CLOUD_CREDENTIALS_URI)", uri, err, hide...)
	}
	return c
}

// GetCredentials implements providers.CredentialsProvider.
func (c *defaultChain) GetCredentials() (*providers.Credentials, error) {
	if c.used != nil {
		cc, err := c.used.p.GetCredentials()
		if err != nil {
			return nil, errors.New(c.used.errorf(err))
		}
		return cc, nil
	}
	var errs []string
	for i := range c.sources {
		s := &c.sources[i]
		cc, err := s.p.GetCredentials()
		if err != nil {
			errs = append(errs, s.errorf(err))
			continue
		}
		c.used = s
		return cc, nil
	}
	return nil, fmt.Errorf("no source gave a key: %s", strings.Join(errs, "; "))
}

// GetProviderName implements providers.CredentialsProvider.
func (c *defaultChain) GetProviderName() string {
	if c.used != nil {
		return "default/" + c.used.p.GetProviderName()
	}
	return "default"
}

// source names the source in use, once one gave a key.
func (c *defaultChain) source() string {
	if c.used != nil {
		return c.used.name
	}
	return ""
}

// redactURL drops a URL's query and user info, where a token could hide.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// ErrNoCredentials: no source of the default chain gave an OSS key. A
// daemon says whose credentials were missing (the mount's own, or its own
// fallback).
var ErrNoCredentials = errors.New("no OSS credentials")

// check obtains keys once, so a source that cannot give any fails New
// with its own error rather than the first request with a 403.
func (c *credProvider) check() error {
	_, err := c.get()
	chain, isChain := c.p.(*defaultChain)
	switch {
	case err != nil && isChain && chain.source() == "":
		return fmt.Errorf("%w: set OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET, pass --oss-credentials-file, or configure a source of the Alibaba Cloud default chain (%s): %w", ErrNoCredentials, ChainSources, err)
	case err != nil:
		return err
	case isChain:
		c.source = "the Alibaba Cloud default chain: " + chain.source()
	}
	return nil
}

// isExpiredToken tells the store's refusal of an expired STS key.
func isExpiredToken(err error) bool {
	_, code := statusOf(err)
	return code == "SecurityTokenExpired" || code == "InvalidSecurityToken.Expired"
}

// regionOf returns the region an OSS endpoint host names
// (oss-cn-hangzhou.aliyuncs.com, oss-cn-hangzhou-internal.aliyuncs.com,
// BUCKET.oss-cn-hangzhou.aliyuncs.com), or "".
func regionOf(host string) string {
	h := strings.ToLower(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	if !strings.HasSuffix(h, ".aliyuncs.com") {
		return ""
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, ".aliyuncs.com"), ".") {
		r, ok := strings.CutPrefix(label, "oss-")
		if !ok {
			continue
		}
		r = strings.TrimSuffix(r, "-internal")
		if r == "" || strings.HasPrefix(r, "accelerate") {
			return ""
		}
		return r
	}
	return ""
}

// LocalRegion is the region a V4 signature names for an endpoint that is
// an IP address or localhost (an emulator) when no region is set.
const LocalRegion = "cn-hangzhou"

// resolveSigning picks the signature version ("v4" unless "v1" is asked
// for) and, for V4, the region: the endpoint's, else the option's, else
// OSS_REGION, else LocalRegion for a local endpoint.
func resolveSigning(host string, local bool, optRegion, version string) (alioss.AuthVersionType, string, error) {
	switch strings.ToLower(version) {
	case "v1":
		return alioss.AuthV1, "", nil
	case "", "v4":
	default:
		return "", "", fmt.Errorf("OSS signature version %q: want v4 (the default) or v1", version)
	}
	region := regionOf(host)
	if region == "" {
		region = optRegion
	}
	if region == "" {
		region = os.Getenv("OSS_REGION")
	}
	if region == "" && local {
		region = LocalRegion
	}
	if region == "" {
		return "", "", fmt.Errorf("OSS endpoint %s names no region, which V4 signatures need: pass --oss-region (for example cn-hangzhou), set OSS_REGION, or use an oss-REGION.aliyuncs.com endpoint (or --oss-signature-version v1 where V1 is still accepted)", host)
	}
	return alioss.AuthV4, region, nil
}

// SecretEnv returns the environment variables that hold OSS keys or
// tokens the backend (or credentials-go's chain) reads: never for the
// job's eyes.
func SecretEnv() []string {
	return []string{"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN",
		"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN", "ALIBABA_CLOUD_OIDC_TOKEN"}
}
