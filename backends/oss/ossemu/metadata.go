package ossemu

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The paths the metadata listener serves (besides the instance-metadata
// paths of ECS and EC2 under /latest/).
const (
	// AlibabaCredentialsURIPath is a credentials URI
	// (ALIBABA_CLOUD_CREDENTIALS_URI) answering credentials-go's format.
	AlibabaCredentialsURIPath = "/alibaba/credentials"
	// AWSContainerCredentialsPath is an ECS/EKS Pod Identity container
	// credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI).
	AWSContainerCredentialsPath = "/aws/credentials"
	// awsSSOPath is AWS IAM Identity Center's GetRoleCredentials (the SSO
	// portal API; AWS_ENDPOINT_URL_SSO points the SDK here).
	awsSSOPath = "/federation/credentials"
)

// MetadataOptions configures the metadata listener (Server.ServeMetadata).
type MetadataOptions struct {
	// RoleName is the instance's RAM role (ECS) and IAM role (EC2): what
	// .../security-credentials/ lists. DefaultRoleName when empty.
	RoleName string
	// RequireToken refuses metadata reads without a session token from PUT
	// /latest/api/token: ECS's hardened mode and EC2's IMDSv2-only mode.
	RequireToken bool
	// ContainerAuthToken, when set, is the Authorization header the AWS
	// container credentials endpoint demands (what
	// AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) gives the SDK).
	ContainerAuthToken string
	// SSOAccessToken, when set, is the bearer token the SSO portal API
	// (GetRoleCredentials) demands; otherwise any non-empty one passes.
	SSOAccessToken string
}

// DefaultRoleName is the instance's role when MetadataOptions names none.
const DefaultRoleName = "mlfsd-emulator-role"

// metadata is the state of the metadata listener.
type metadata struct {
	s   *Server
	opt MetadataOptions

	mu     sync.Mutex
	tokens map[string]time.Time // session tokens and their expiry
}

// MetadataHandler returns the handler of the instance-metadata endpoints:
// ECS's (/latest/meta-data/ram/security-credentials/ROLE, with the
// hardened mode's token from PUT /latest/api/token) and EC2's IMDSv2
// (/latest/meta-data/iam/security-credentials/ROLE), a credentials URI
// (AlibabaCredentialsURIPath) and AWS container credentials
// (AWSContainerCredentialsPath) and AWS IAM Identity Center's role
// credentials (SSO: /federation/credentials). Each hands out a key issued as STS's
// are. ServeMetadata adds the proxy that reaches it from SDKs whose
// endpoint is fixed.
func (s *Server) MetadataHandler(opt MetadataOptions) http.Handler {
	if opt.RoleName == "" {
		opt.RoleName = DefaultRoleName
	}
	return &metadata{s: s, opt: opt, tokens: map[string]time.Time{}}
}

func (m *metadata) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	m.s.count("metadata.requests")
	switch {
	case p == "/latest/api/token":
		m.token(w, r)
	case strings.HasPrefix(p, "/latest/meta-data/ram/security-credentials/"):
		m.roleCredentials(w, r, strings.TrimPrefix(p, "/latest/meta-data/ram/security-credentials/"), false)
	case strings.HasPrefix(p, "/latest/meta-data/iam/security-credentials/"):
		m.roleCredentials(w, r, strings.TrimPrefix(p, "/latest/meta-data/iam/security-credentials/"), true)
	case p == AlibabaCredentialsURIPath:
		k := m.s.IssueKey(0)
		writeJSON(w, map[string]string{"Code": "Success", "AccessKeyId": k.AccessKeyID, "AccessKeySecret": k.AccessKeySecret,
			"SecurityToken": k.SecurityToken, "Expiration": k.Expires.UTC().Format("2006-01-02T15:04:05Z")})
	case p == AWSContainerCredentialsPath:
		if m.opt.ContainerAuthToken != "" && r.Header.Get("Authorization") != m.opt.ContainerAuthToken {
			w.WriteHeader(http.StatusUnauthorized)
			writeJSON(w, map[string]string{"code": "AccessDenied", "message": "the Authorization header does not match the container's token"})
			return
		}
		k := m.s.IssueKey(0)
		writeJSON(w, map[string]string{"AccessKeyId": k.AccessKeyID, "SecretAccessKey": k.AccessKeySecret,
			"Token": k.SecurityToken, "Expiration": k.Expires.UTC().Format(time.RFC3339)})
	case p == awsSSOPath:
		tok := r.Header.Get("x-amz-sso_bearer_token")
		if tok == "" || m.opt.SSOAccessToken != "" && tok != m.opt.SSOAccessToken {
			w.Header().Set("x-amzn-ErrorType", "UnauthorizedException")
			w.WriteHeader(http.StatusUnauthorized)
			writeJSON(w, map[string]string{"message": "Session token not found or invalid"})
			return
		}
		if r.URL.Query().Get("role_name") == "" || r.URL.Query().Get("account_id") == "" {
			w.Header().Set("x-amzn-ErrorType", "InvalidRequestException")
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"message": "role_name and account_id are required"})
			return
		}
		k := m.s.IssueKey(0)
		writeJSON(w, map[string]any{"roleCredentials": map[string]any{"accessKeyId": k.AccessKeyID, "secretAccessKey": k.AccessKeySecret,
			"sessionToken": k.SecurityToken, "expiration": k.Expires.UnixMilli()}})
	default:
		http.NotFound(w, r)
	}
}

// token answers PUT /latest/api/token with a session token living the
// TTL asked for (ECS: X-aliyun-ecs-metadata-token-ttl-seconds; EC2:
// X-aws-ec2-metadata-token-ttl-seconds; 1 to 21600 seconds).
func (m *metadata) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	v := firstNonEmpty(r.Header.Get("X-aliyun-ecs-metadata-token-ttl-seconds"), r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	ttl, err := strconv.Atoi(v)
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "token TTL header missing or not 1..21600 seconds", http.StatusBadRequest)
		return
	}
	tok := randHex(24)
	m.mu.Lock()
	m.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
	m.mu.Unlock()
	w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", v)
	_, _ = w.Write([]byte(tok))
}

func (m *metadata) validToken(r *http.Request) bool {
	tok := firstNonEmpty(r.Header.Get("X-aliyun-ecs-metadata-token"), r.Header.Get("X-aws-ec2-metadata-token"))
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.tokens[tok]
	return ok && time.Now().Before(exp)
}

// roleCredentials lists the role (empty role) or hands out its keys, in
// ECS's JSON or EC2's.
func (m *metadata) roleCredentials(w http.ResponseWriter, r *http.Request, role string, aws bool) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if m.opt.RequireToken && !m.validToken(r) {
		m.s.count("metadata.unauthorized")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	role = strings.TrimSuffix(role, "/")
	switch role {
	case "":
		_, _ = w.Write([]byte(m.opt.RoleName))
		return
	case m.opt.RoleName:
	default:
		http.NotFound(w, r)
		return
	}
	k := m.s.IssueKey(0)
	now := time.Now().UTC()
	if aws {
		writeJSON(w, map[string]string{"Code": "Success", "LastUpdated": now.Format(time.RFC3339), "Type": "AWS-HMAC",
			"AccessKeyId": k.AccessKeyID, "SecretAccessKey": k.AccessKeySecret, "Token": k.SecurityToken,
			"Expiration": k.Expires.UTC().Format(time.RFC3339)})
		return
	}
	writeJSON(w, map[string]string{"Code": "Success", "LastUpdated": now.Format("2006-01-02T15:04:05Z"),
		"AccessKeyId": k.AccessKeyID, "AccessKeySecret": k.AccessKeySecret, "SecurityToken": k.SecurityToken,
		"Expiration": k.Expires.UTC().Format("2006-01-02T15:04:05Z")})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// ServeMetadata serves the metadata handler on l until ctx is cancelled,
// and is at the same time an HTTP proxy for SDKs whose endpoints cannot
// be moved: set HTTP_PROXY to it and a request for
// http://100.100.100.200/latest/... (the ECS metadata address the
// Alibaba Cloud SDKs fix) is answered here; set HTTPS_PROXY to it and a
// CONNECT to any host (sts.aliyuncs.com, whose https:// the SDKs fix) is
// answered by the emulator itself (STS, OSS, S3) over TLS, with a
// certificate for that host signed by CACertPEM's authority, which the
// client must trust (SSL_CERT_FILE).
func (s *Server) ServeMetadata(ctx context.Context, l net.Listener, opt MetadataOptions) error {
	mh := s.MetadataHandler(opt)
	tunnels := newConnListener(l.Addr())
	inner := &http.Server{Handler: s, ReadHeaderTimeout: time.Minute, ConnContext: s.connContext}
	innerDone := make(chan error, 1)
	go func() { innerDone <- inner.Serve(tunnels) }()
	hs := &http.Server{
		ReadHeaderTimeout: time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodConnect {
				mh.ServeHTTP(w, r)
				return
			}
			s.count("metadata.connect")
			hj, ok := w.(http.Hijacker)
			if !ok {
				http.Error(w, "cannot tunnel", http.StatusInternalServerError)
				return
			}
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			c, buf, err := hj.Hijack()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
			tc := tls.Server(&bufConn{Conn: c, r: buf.Reader}, &tls.Config{
				GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
					name := hello.ServerName
					if name == "" {
						name = host
					}
					return s.leafCert(name)
				},
			})
			if !tunnels.push(tc) {
				c.Close()
			}
		}),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		hs.Close()
		<-errc
	}
	tunnels.Close()
	inner.Close()
	<-innerDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// bufConn is a hijacked connection with what its reader had buffered.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connListener hands tunnelled connections to an http.Server.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// tlsAuthority is the emulator's own certificate authority, made on first
// use, and the leaf certificates it signed, by host name.
type tlsAuthority struct {
	once   sync.Once
	err    error
	key    *ecdsa.PrivateKey
	cert   *x509.Certificate
	pem    []byte
	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func (a *tlsAuthority) init() error {
	a.once.Do(func() {
		a.key, a.err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if a.err != nil {
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "mlfsd emulator CA"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
			IsCA:                  true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &a.key.PublicKey, a.key)
		if err != nil {
			a.err = err
			return
		}
		a.cert, a.err = x509.ParseCertificate(der)
		a.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		a.leaves = map[string]*tls.Certificate{}
	})
	return a.err
}

// CACertPEM returns the certificate (PEM) of the authority that signs the
// emulator's TLS certificates (see ServeMetadata): what a client trusts to
// reach the emulator as sts.aliyuncs.com.
func (s *Server) CACertPEM() ([]byte, error) {
	if err := s.ca.init(); err != nil {
		return nil, err
	}
	return s.ca.pem, nil
}

// leafCert returns a certificate for name signed by the emulator's CA.
func (s *Server) leafCert(name string) (*tls.Certificate, error) {
	a := &s.ca
	if err := a.init(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leaves[name]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("emulator certificate for %s: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	a.leaves[name] = c
	return c, nil
}
