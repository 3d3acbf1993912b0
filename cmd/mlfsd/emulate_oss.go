package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/internal/ready"
)

func newEmulateOSSCmd(a *app) *cobra.Command {
	var (
		root, listen, bandwidth, kinds string
		keyID, secretFile, rulesFile   string
		vhosts, stsRoles               []string
		anonymous, mdToken             bool
		ttfb, stsDuration              time.Duration
		mdListen, mdRole, ctTokenFile  string
		caOut                          string
		rate                           float64
		seed                           uint64
		synN, synFanOut                int64
		synBucket, synSize             string
	)
	c := &cobra.Command{
		Use:   "oss --root DIR [--listen 127.0.0.1:9000]",
		Short: "Serve a directory over the OSS protocol (and S3)",
		Long: `Serve DIR over the OSS REST protocol, well enough for the aliyun SDK, and over the
S3 REST protocol for rclone, s3fs and boto3. Each top-level directory of DIR is a
bucket and each object a plain file under it. Buckets are addressed path-style
(ADDR/bucket/key) or virtual-hosted-style (bucket.localhost:PORT/key,
bucket.127.0.0.1:PORT/key, or bucket.NAME:PORT for each --virtual-host NAME).

Requests must be signed (OSS V1/V4, S3 V2/V4) with the emulator's key pair, as a
private bucket demands; unsigned or wrongly signed ones get 403. The pair is
OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET from the environment (the variables
mlfsd itself reads, so one export serves both), or --access-key-id with
--access-key-secret-file; with neither, the demo pair
` + ossemu.DefaultAccessKeyID + ` / ` + ossemu.DefaultAccessKeySecret + `. --anonymous accepts any request.
--access-rules FILE adds key pairs that may do only what their rules allow (list,
get or put under a bucket and prefix), refused otherwise with 403 AccessDenied:
  {"keys": [{"id": "reader", "secret": "...",
             "allow": [{"bucket": "data", "prefix": "train/", "actions": ["list", "get"]}]}]}

Point mlfsd at it with --oss-endpoint http://ADDR (or oss://bucket.ADDR/prefix/)
and the same OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET, or, over S3, with
s3://bucket/prefix/?endpoint=http://ADDR (or --s3-endpoint http://ADDR) and the
pair as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Request counters are
served as JSON at http://ADDR` + ossemu.StatsPath + `.

ADDR is also an STS endpoint: Alibaba Cloud's AssumeRoleWithOIDC and AssumeRole
(the latter signed with the emulator's pair) and AWS's AssumeRoleWithWebIdentity
(AWS_ENDPOINT_URL_STS=http://ADDR). They issue keys living --sts-duration that
OSS and S3 requests may then use with their token; once expired, such a key gets
the store's own error (OSS 403 SecurityTokenExpired, S3 400 ExpiredToken).
--sts-role limits the roles that may be assumed.

--synthetic N serves, in bucket --synthetic-bucket (default ` + ossemu.SyntheticBucket + `), a generated
read-only namespace of N objects of --synthetic-size bytes, named f<i> (zero-padded)
and, with --synthetic-fanout F, under d<i/F>/: names, sizes and contents are
computed on each request, so 10,000,000 objects cost no disk and no memory per
object (mlfsd's scale benchmarks use it).

--metadata-listen ADDR2 serves, on a second address, the instance metadata of
ECS (RAM role) and EC2 (IMDSv2, AWS_EC2_METADATA_SERVICE_ENDPOINT=http://ADDR2),
a credentials URI (ALIBABA_CLOUD_CREDENTIALS_URI=http://ADDR2` + ossemu.AlibabaCredentialsURIPath + `) and
container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI=http://ADDR2` + ossemu.AWSContainerCredentialsPath + `).
ADDR2 is also a proxy for the endpoints SDKs do not let one move: with
HTTP_PROXY=http://ADDR2 a request for http://100.100.100.200/ (ECS metadata) is
answered there, and with HTTPS_PROXY=http://ADDR2 any https host (sts.aliyuncs.com)
is the emulator itself, over TLS under an authority whose certificate is written
to --ca-cert-out for SSL_CERT_FILE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" {
				return errors.New("emulate oss: --root DIR is required")
			}
			if stsDuration < 0 {
				return fmt.Errorf("--sts-duration %v: want a positive duration", stsDuration)
			}
			opt := ossemu.Options{TTFB: ttfb, ErrorRate: rate, Seed: seed, Log: a.log, Anonymous: anonymous, VirtualHosts: vhosts,
				STSDuration: stsDuration, STSRoles: stsRoles}
			if !anonymous {
				id, secret, err := emulatorKeys(keyID, secretFile)
				if err != nil {
					return err
				}
				opt.AccessKeyID, opt.AccessKeySecret = id, secret
			}
			if rulesFile != "" {
				keys, err := ossemu.LoadKeys(rulesFile)
				if err != nil {
					return fmt.Errorf("--access-rules: %w", err)
				}
				opt.Keys = keys
			}
			if bandwidth != "" {
				n, err := humanize.ParseBytes(strings.TrimSuffix(strings.TrimSpace(bandwidth), "/s"))
				if err != nil {
					return fmt.Errorf("--conn-bandwidth %q: want bytes per second like 100MB/s", bandwidth)
				}
				opt.ConnBandwidth = int64(n)
			}
			k, err := ossemu.ParseFaultKinds(kinds)
			if err != nil {
				return fmt.Errorf("--error-kinds: %w", err)
			}
			opt.ErrorKinds = k
			if synN != 0 || synFanOut != 0 {
				size, err := humanize.ParseBytes(synSize)
				if err != nil {
					return fmt.Errorf("--synthetic-size %q: want a size like 4KiB", synSize)
				}
				opt.Synthetic = &ossemu.Synthetic{Bucket: synBucket, N: synN, FanOut: synFanOut, Size: int64(size)}
			}
			srv, err := ossemu.New(root, opt)
			if err != nil {
				return err
			}
			if err := ready.Check(a.readyFile); err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("emulate oss: %w", err)
			}
			// The listeners are bound: a client connecting from here on
			// waits in their backlogs until Serve accepts.
			r := ready.Info{Addr: l.Addr().String()}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if mdListen != "" {
				if mdRole == "" {
					mdRole = ossemu.DefaultRoleName
				}
				mopt := ossemu.MetadataOptions{RoleName: mdRole, RequireToken: mdToken}
				if ctTokenFile != "" {
					b, err := os.ReadFile(ctTokenFile)
					if err != nil {
						return fmt.Errorf("--container-auth-token-file: %w", err)
					}
					mopt.ContainerAuthToken = strings.TrimSpace(string(b))
				}
				if caOut != "" {
					pem, err := srv.CACertPEM()
					if err == nil {
						err = os.WriteFile(caOut, pem, 0o644)
					}
					if err != nil {
						return fmt.Errorf("--ca-cert-out: %w", err)
					}
				}
				ml, err := net.Listen("tcp", mdListen)
				if err != nil {
					return fmt.Errorf("emulate oss: metadata: %w", err)
				}
				mdone := make(chan error, 1)
				go func() { mdone <- srv.ServeMetadata(ctx, ml, mopt) }()
				defer func() {
					stop()
					if err := <-mdone; err != nil {
						a.log.Error("OSS emulator metadata", "err", err)
					}
				}()
				r.MetadataAddr = ml.Addr().String()
				a.log.Info("OSS emulator metadata serving", "addr", ml.Addr().String(), "role", mopt.RoleName, "require_token", mdToken)
			}
			a.log.Info("OSS emulator serving", "addr", l.Addr().String(), "endpoint", "http://"+l.Addr().String(), "sts_duration", srvSTSDuration(stsDuration),
				"root", srv.Root(), "access_key_id", keyIDShown(opt), "anonymous", anonymous, "ttfb", ttfb, "conn_bandwidth", opt.ConnBandwidth, "error_rate", rate, "error_kinds", kinds, "seed", seed)
			if err := ready.Write(a.readyFile, r); err != nil {
				return err
			}
			if err := srv.Serve(ctx, l); err != nil {
				return fmt.Errorf("emulate oss: %w", err)
			}
			a.log.Info("OSS emulator stopped")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "", "directory to serve: DIR/<bucket>/<key>")
	f.StringVar(&listen, "listen", "127.0.0.1:9000", "address to listen on (port 0 picks a free port)")
	f.DurationVar(&ttfb, "ttfb", 0, "delay before the first byte of every response, e.g. 20ms")
	f.StringVar(&bandwidth, "conn-bandwidth", "", "bandwidth per connection and direction, e.g. 100MB/s (default unlimited)")
	f.Float64Var(&rate, "error-rate", 0, "probability (0..1) that a request fails with one of --error-kinds")
	f.StringVar(&kinds, "error-kinds", "all", "kinds of failure to inject: comma-separated 500, 503, reset, truncate, or all")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault generator")
	f.StringVar(&keyID, "access-key-id", "", "access key id requests must be signed with (default $OSS_ACCESS_KEY_ID, else the demo pair)")
	f.StringVar(&secretFile, "access-key-secret-file", "", "file holding the access key secret (default $OSS_ACCESS_KEY_SECRET)")
	f.BoolVar(&anonymous, "anonymous", false, "accept any request, signed or not")
	f.StringVar(&rulesFile, "access-rules", "", "JSON file of further key pairs and what each may list, get or put (see above)")
	f.StringSliceVar(&vhosts, "virtual-host", nil, "host name under which BUCKET.NAME addresses a bucket (default localhost)")
	f.DurationVar(&stsDuration, "sts-duration", ossemu.DefaultSTSDuration, "lifetime of the keys STS and the metadata endpoints issue, e.g. 60s")
	f.StringSliceVar(&stsRoles, "sts-role", nil, "role ARN STS lets be assumed (repeatable; default any well-formed ARN)")
	f.StringVar(&mdListen, "metadata-listen", "", "address of the metadata endpoints and proxy (default off)")
	f.StringVar(&mdRole, "metadata-role", "", "the instance's role name (default "+ossemu.DefaultRoleName+")")
	f.BoolVar(&mdToken, "metadata-require-token", false, "refuse metadata reads without a session token (ECS hardened mode, IMDSv2 only)")
	f.StringVar(&ctTokenFile, "container-auth-token-file", "", "file holding the Authorization token container credentials demand")
	f.StringVar(&caOut, "ca-cert-out", "", "write the emulator's TLS authority certificate (PEM) here")
	addReadyFileFlag(f, a)
	f.Int64Var(&synN, "synthetic", 0, "serve a generated namespace of this many objects in --synthetic-bucket (see above)")
	f.Int64Var(&synFanOut, "synthetic-fanout", 0, "objects per directory of the generated namespace (0: one flat directory)")
	f.StringVar(&synSize, "synthetic-size", "4KiB", "size of each generated object")
	f.StringVar(&synBucket, "synthetic-bucket", ossemu.SyntheticBucket, "bucket of the generated namespace")
	return c
}

// emulatorKeys resolves the emulator's key pair: flags first, then
// OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET; both empty means the
// emulator's demo pair. The secret never comes from the command line.
func emulatorKeys(keyID, secretFile string) (string, string, error) {
	id, secret := keyID, ""
	if id == "" {
		id = os.Getenv("OSS_ACCESS_KEY_ID")
	}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return "", "", fmt.Errorf("--access-key-secret-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
		if secret == "" {
			return "", "", fmt.Errorf("--access-key-secret-file %s is empty", secretFile)
		}
	} else {
		secret = os.Getenv("OSS_ACCESS_KEY_SECRET")
	}
	switch {
	case id == "" && secret != "":
		return "", "", errors.New("emulate oss: an access key secret is set but no access key id (--access-key-id or OSS_ACCESS_KEY_ID)")
	case id != "" && secret == "":
		return "", "", fmt.Errorf("emulate oss: access key id %q has no secret (--access-key-secret-file or OSS_ACCESS_KEY_SECRET)", id)
	}
	return id, secret, nil
}

func keyIDShown(opt ossemu.Options) string {
	switch {
	case opt.Anonymous:
		return "(any)"
	case opt.AccessKeyID == "":
		return ossemu.DefaultAccessKeyID
	}
	return opt.AccessKeyID
}

func srvSTSDuration(d time.Duration) time.Duration {
	if d == 0 {
		return ossemu.DefaultSTSDuration
	}
	return d
}
