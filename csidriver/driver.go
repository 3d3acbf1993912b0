// Package csidriver is mlfsd's CSI plugin: the Identity and Node services
// that mount channels into pods, and a small Controller service that
// provisions a prefix per volume under a StorageClass's base URI.
//
// Mounts are made by a Mounter: the node service layer in-process, or the
// node daemon through its API socket. The driver keeps no state of its own:
// the mounter knows what is mounted where, and a provisioned volume's ID
// says where its data lives.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// DefaultName is the driver name registered with Kubernetes (CSIDriver
// object, StorageClass provisioner, PersistentVolume csi.driver).
const DefaultName = "mlfsd.csi.mlfsd.io"

// Mounter makes and removes the mounts of this node. Mount of the same
// request at the same target again returns the live mount; a different
// request there fails wrapping node.ErrTargetBusy. Unmount drains an output
// first (until ctx is done), and fails wrapping node.ErrNotMounted for a
// target it does not serve.
type Mounter interface {
	Mount(ctx context.Context, req node.MountRequest) (node.MountInfo, error)
	Unmount(ctx context.Context, target string) error
}

// Warmer starts a warm-up of a mount's cache in the background (a Mounter
// that implements it serves AttrWarm): node.Node, and the daemon's
// api.Client.
type Warmer interface {
	Warm(ctx context.Context, req node.WarmRequest) (node.WarmStatus, error)
}

// Options configure a Driver.
type Options struct {
	// Name is the driver name (default DefaultName).
	Name string
	// Version is reported by GetPluginInfo.
	Version string
	// NodeID identifies this node (NodeGetInfo); required.
	NodeID string
	// Mounter serves NodePublishVolume and NodeUnpublishVolume; required.
	Mounter Mounter
	// Settings configure the stores the controller opens to create and
	// delete volume prefixes (endpoints, retries; a StorageClass's mount
	// options apply on top); credentials come from each request's secrets.
	Settings node.Settings
	// DrainTimeout bounds the drain of an output in NodeUnpublishVolume
	// (default 10 minutes). What is not uploaded by then stays journaled
	// in the staging directory and is uploaded at the next mount of the
	// channel; the call reports it as an error once.
	DrainTimeout time.Duration
	// OSSAudience and S3Audience are the audiences of the pod's
	// service-account tokens exchanged for a volume's OSS and S3 role
	// (defaults DefaultOSSAudience, DefaultS3Audience); the CSIDriver
	// object's tokenRequests must ask for them.
	OSSAudience, S3Audience string
	// Log receives one line per call (requests redacted: see redact.go).
	Log *slog.Logger

	// NASRoots are the host directories a volume's nas:// uri may name
	// (the plugin's --nas-root); the zero policy allows none.
	NASRoots nasroots.Policy
	// EphemeralAttributes are the only attributes an inline ephemeral
	// volume (written by whoever may create a pod) may set, besides the
	// keys kubelet adds itself (default: uri and mode). Shared cache
	// attributes can never be among them.
	EphemeralAttributes []string
	// KubeletRoot is the directory publish targets must lie under
	// (default DefaultKubeletRoot).
	KubeletRoot string
	// ControllerKey signs the IDs of the volumes CreateVolume makes, so
	// that DeleteVolume removes data only under an ID this controller
	// issued. Without it, CreateVolume refuses onDelete: delete.
	ControllerKey []byte
}

// Driver is the CSI plugin.
type Driver struct {
	opt         Options
	log         *slog.Logger
	kubeletRoot string          // resolved
	ephemeral   map[string]bool // attribute keys an inline volume may set
}

// DefaultEphemeralAttributes are the attributes an inline ephemeral
// volume may set unless the administrator lists others.
var DefaultEphemeralAttributes = []string{AttrURI, AttrMode}

// minControllerKey is the shortest controller key accepted.
const minControllerKey = 16

// New checks opt and returns a driver.
func New(opt Options) (*Driver, error) {
	if opt.Name == "" {
		opt.Name = DefaultName
	}
	if opt.NodeID == "" {
		return nil, errors.New("csi: a node ID is required (--node-id)")
	}
	if opt.Mounter == nil {
		return nil, errors.New("csi: no mounter")
	}
	if opt.DrainTimeout <= 0 {
		opt.DrainTimeout = 10 * time.Minute
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.OSSAudience == "" {
		opt.OSSAudience = DefaultOSSAudience
	}
	if opt.S3Audience == "" {
		opt.S3Audience = DefaultS3Audience
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.KubeletRoot == "" {
		opt.KubeletRoot = DefaultKubeletRoot
	}
	if !filepath.IsAbs(opt.KubeletRoot) || filepath.Clean(opt.KubeletRoot) == "/" {
		return nil, fmt.Errorf("csi: --kubelet-root %q: want an absolute directory other than /", opt.KubeletRoot)
	}
	root, err := nasroots.Resolve(opt.KubeletRoot)
	if err != nil {
		return nil, fmt.Errorf("csi: --kubelet-root: %w", err)
	}
	if opt.EphemeralAttributes == nil {
		opt.EphemeralAttributes = DefaultEphemeralAttributes
	}
	eph := map[string]bool{}
	for _, k := range opt.EphemeralAttributes {
		switch k {
		case AttrURI, AttrMode:
		case AttrSharedCache, AttrSharedCacheSize:
			return nil, fmt.Errorf("csi: --ephemeral-attributes: %q is an administrator's setting (the daemon's --%s), never a pod's", k, k)
		default:
			if _, err := mountOption(k); err != nil {
				return nil, fmt.Errorf("csi: --ephemeral-attributes: %v", err)
			}
		}
		eph[k] = true
	}
	if opt.ControllerKey != nil && len(opt.ControllerKey) < minControllerKey {
		return nil, fmt.Errorf("csi: the controller key has %d bytes; want at least %d (e.g. head -c 32 /dev/urandom | base64)", len(opt.ControllerKey), minControllerKey)
	}
	return &Driver{opt: opt, log: opt.Log, kubeletRoot: root, ephemeral: eph}, nil
}

// ReadControllerKey reads a controller key file (a Kubernetes Secret's
// key, mounted): its content, surrounding white space trimmed. Errors
// name the file, never its content.
func ReadControllerKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("controller key: %w", err)
	}
	k := []byte(strings.TrimSpace(string(b)))
	if len(k) < minControllerKey {
		return nil, fmt.Errorf("controller key %s: %d bytes; want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(k), minControllerKey)
	}
	return k, nil
}

// Listen opens the endpoint: unix:///path/to/csi.sock (a stale socket file
// left by a previous run is removed) or unix:/path.
func Listen(endpoint string) (net.Listener, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" {
		return nil, fmt.Errorf("--endpoint %q: want unix:///path/to/csi.sock", endpoint)
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if p == "" || !filepath.IsAbs(p) {
		return nil, fmt.Errorf("--endpoint %q: want an absolute socket path (unix:///path/to/csi.sock)", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return nil, fmt.Errorf("--endpoint %q: %w", endpoint, err)
	}
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--endpoint %q: %s exists and is not a socket", endpoint, p)
		}
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("--endpoint %q: remove stale socket: %w", endpoint, err)
		}
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("--endpoint %q: %w", endpoint, err)
	}
	// Only the kubelet (root) talks to the plugin.
	if err := os.Chmod(p, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("--endpoint %q: %w", endpoint, err)
	}
	return l, nil
}

// Serve serves the Identity, Node and Controller services on l until ctx is
// done, then stops gracefully (calls under way finish).
func (d *Driver) Serve(ctx context.Context, l net.Listener) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logCalls))
	csi.RegisterIdentityServer(srv, &identity{d: d})
	csi.RegisterNodeServer(srv, &nodeServer{d: d})
	csi.RegisterControllerServer(srv, &controller{d: d})
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			srv.GracefulStop()
		case <-stopped:
		}
	}()
	err := srv.Serve(l)
	close(stopped)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// logCalls logs every call once, with its request redacted (redactRequest:
// secrets stripped, unknown attributes hidden, the credentials of any URI
// hidden), and redacts the error it answers with the same way, since the
// kubelet logs errors and puts them in pod events. The frequent read-only
// calls log at debug level.
func (d *Driver) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	resp, err := h(ctx, req)
	if err != nil {
		st := status.Convert(err)
		err = status.Error(st.Code(), redactString(st.Message()))
	}
	lv := slog.LevelInfo
	switch method {
	case "Probe", "GetPluginInfo", "GetPluginCapabilities", "NodeGetCapabilities", "NodeGetInfo", "ControllerGetCapabilities":
		lv = slog.LevelDebug
	}
	if err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists:
		default:
			lv = slog.LevelWarn
		}
	}
	if !d.log.Enabled(ctx, lv) {
		return resp, err
	}
	req = stripTokens(req)
	if err != nil {
		d.log.Log(ctx, lv, "csi call failed", "method", method, "request", redactRequest(req), "err", err)
	} else {
		d.log.Log(ctx, lv, "csi call", "method", method, "request", redactRequest(req))
	}
	return resp, err
}

// stripTokens returns a publish request without the pod's service-account
// tokens, for logging: they are as secret as the publish secrets, but sit
// in the volume context, which the CSI spec does not mark csi_secret.
func stripTokens(req any) any {
	r, ok := req.(*csi.NodePublishVolumeRequest)
	if !ok {
		return req
	}
	if _, ok := r.GetVolumeContext()[TokensKey]; !ok {
		return req
	}
	c := proto.Clone(r).(*csi.NodePublishVolumeRequest)
	c.VolumeContext[TokensKey] = "***stripped***"
	return c
}

// identity is the CSI Identity service.
type identity struct {
	csi.UnimplementedIdentityServer
	d *Driver
}

func (s *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.d.opt.Name, VendorVersion: s.d.opt.Version}, nil
}

func (s *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

// Probe reports ready: the driver serves as soon as it listens; a mounter
// that cannot serve (daemon down) fails the publish calls themselves.
func (s *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}
