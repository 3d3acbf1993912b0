package csidriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/fs/mountinfo"
	"github.com/mlfsd/mlfsd/node"
)

// nodeServer is the CSI Node service.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.d.opt.NodeID}, nil
}

// NodeGetCapabilities advertises nothing optional: no staging (a FUSE mount
// per publish is cheap, and the daemon shares the cache between them), no
// volume stats, no expansion.
func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// checkCapability accepts filesystem (mount) volumes in any access mode.
// A filesystem type does not apply to a FUSE channel; mount flags (a
// PersistentVolume's mountOptions) are mount options (withMountFlags).
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errors.New("volume capability is required")
	}
	if c.GetBlock() != nil {
		return errors.New("block volumes are not supported: mlfsd volumes are filesystems (use volumeMode: Filesystem)")
	}
	if c.GetMount() == nil {
		return errors.New("volume capability has no access type (want mount)")
	}
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return errors.New("volume capability has no access mode")
	}
	return nil
}

// readOnlyMode reports whether an access mode lets only readers in.
func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// NodePublishVolume mounts the volume's channel at the target path. The
// volume's attributes say what: uri and mode, plus mount options; the
// publish secrets carry the store credentials, and a role attribute
// (oss-role-arn, s3-role-arn) has the pod's own service-account token
// exchanged for the pod's own short-lived keys. An output published
// read-only (readonly: true, or a reader-only access mode) is mounted as an
// input of the same prefix.
//
// kubelet calls it again for a live volume when the CSIDriver object has
// requiresRepublish (about once a minute, with a fresh token when the
// old one nears its end): the mount's credentials are refreshed in place.
func (s *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	target, err := s.d.checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
		return nil, status.Errorf(codes.InvalidArgument, "target_path %q: exists and is not a directory", target)
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	attrs := req.GetVolumeContext()
	if attrs[ephemeralKey] == "true" {
		if err := s.d.checkEphemeral(attrs); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
		}
	}
	spec, err := parseAttributes(attrs)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
	}
	spec, roFlag, err := withMountFlags(spec, req.GetVolumeCapability().GetMount().GetMountFlags())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
	}
	readOnly := !spec.output || roFlag || req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	warmer, canWarm := s.d.opt.Mounter.(Warmer)
	if spec.warm && !canWarm {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume attribute %q: this plugin's mounter cannot warm a cache (run it with the node daemon)", req.GetVolumeId(), AttrWarm)
	}
	if spec.uri, err = s.d.opt.NASRoots.Check(spec.uri, !readOnly); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume attribute %q: %v", req.GetVolumeId(), AttrURI, err)
	}
	if tier := spec.options[AttrSharedCache]; tier != "" {
		tu, err := backends.ParseURI(tier)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume attribute %q: %v", req.GetVolumeId(), AttrSharedCache, err)
		}
		if tu, err = s.d.opt.NASRoots.Check(tu, true); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume attribute %q: %v", req.GetVolumeId(), AttrSharedCache, err)
		}
		spec.options[AttrSharedCache] = tu.String()
	}
	creds, err := credentials(req.GetSecrets())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
	}
	tokens, err := podTokens(req.GetVolumeContext())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
	}
	if creds, err = withPodIdentity(creds, spec, tokens, s.d.opt.OSSAudience, s.d.opt.S3Audience); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", req.GetVolumeId(), err)
	}
	mreq := node.MountRequest{
		URI:         spec.uri.String(),
		Target:      target,
		ReadOnly:    readOnly,
		Options:     spec.options,
		Credentials: creds,
	}
	// The CO creates the parent; the target itself is the plugin's to
	// create (and to remove in NodeUnpublishVolume).
	_, statErr := os.Lstat(mreq.Target)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(mreq.Target, 0o750); err != nil {
		// A mount its daemon left stale (after a crash, waiting for this
		// republish to bring its credentials) fails stat with ENOTCONN:
		// the mounter detaches and mounts it again.
		if mounted, merr := isMountpoint(mreq.Target); merr != nil || !mounted {
			return nil, status.Errorf(codes.Internal, "create target %s: %v", mreq.Target, err)
		}
	}
	if _, err := s.d.opt.Mounter.Mount(ctx, mreq); err != nil {
		if created {
			os.Remove(mreq.Target) // leave nothing behind; only an empty dir goes
		}
		if errors.Is(err, node.ErrTargetBusy) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s: %s already holds a different mount: %v", req.GetVolumeId(), mreq.Target, err)
		}
		return nil, status.Errorf(codes.Internal, "volume %s: mount %s at %s: %v", req.GetVolumeId(), mreq.URI, mreq.Target, err)
	}
	s.d.log.Info("published", "volume", redactString(req.GetVolumeId()), "uri", mreq.URI, "target", mreq.Target,
		"read_only", mreq.ReadOnly, "credentials", creds)
	if spec.warm {
		// Started, not waited for: it runs in the node, through this
		// mount (its credentials, its shared tier), and stops with it.
		// A warm-up that cannot start leaves the volume published: it
		// reads as any other, cold.
		if st, err := warmer.Warm(ctx, node.WarmRequest{Target: mreq.Target}); err != nil {
			s.d.log.Warn("warm-up at publish not started", "volume", redactString(req.GetVolumeId()), "target", mreq.Target, "err", err)
		} else {
			s.d.log.Info("warm-up at publish started", "volume", redactString(req.GetVolumeId()), "target", mreq.Target, "warm", st.ID)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume drains an output (bounded by Options.DrainTimeout),
// unmounts and removes the target directory. A target that is not mounted
// (any more) succeeds; a mount left stale by a plugin that died is
// detached.
func (s *nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	target, err := s.d.checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	dctx, cancel := context.WithTimeout(ctx, s.d.opt.DrainTimeout)
	defer cancel()
	err = s.d.opt.Mounter.Unmount(dctx, target)
	var drainErr error
	switch {
	case err == nil:
	case errors.Is(err, node.ErrNotMounted):
		// Not ours (any more). A mount the mounter lost track of (the
		// plugin restarted in-process) is stale: detach it.
		// Only an mlfsd mount is detached: anything else mounted there
		// is not the plugin's to remove.
		mi, mounted, merr := mountinfo.Lookup(target)
		switch {
		case merr != nil:
			return nil, status.Errorf(codes.Internal, "volume %s: %v", req.GetVolumeId(), merr)
		case mounted && mi.FSType != mlfsdFSType:
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s: %s holds a %s mount, not an mlfsd one; left alone", req.GetVolumeId(), target, mi.FSType)
		case mounted:
			if uerr := unix.Unmount(target, unix.MNT_DETACH); uerr != nil {
				return nil, status.Errorf(codes.Internal, "volume %s: detach stale mount %s: %v", req.GetVolumeId(), target, uerr)
			}
			s.d.log.Warn("detached a stale mount", "volume", redactString(req.GetVolumeId()), "target", target)
		}
	default:
		if mounted, merr := isMountpoint(target); merr != nil || mounted {
			return nil, status.Errorf(codes.Internal, "volume %s: unmount %s: %v", req.GetVolumeId(), target, err)
		}
		// Unmounted, but the drain did not finish: report it once.
		drainErr = err
	}
	// The target is the directory kubelet named (or the plugin made) for
	// the mount: only that goes, and only empty.
	if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: target %s is not a directory; not removing it", req.GetVolumeId(), target)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "volume %s: remove target %s: %v", req.GetVolumeId(), target, err)
	}
	if drainErr != nil {
		s.d.log.Warn("unpublished before every closed file was uploaded; the rest stays journaled in the staging dir and is uploaded at the next mount of this channel",
			"volume", redactString(req.GetVolumeId()), "target", target, "drain_timeout", s.d.opt.DrainTimeout, "err", drainErr)
		return nil, status.Errorf(codes.DeadlineExceeded,
			"volume %s: unmounted %s, but the upload drain did not finish within %s (%v); what is left stays journaled in the staging dir and is uploaded at the next mount of this channel",
			req.GetVolumeId(), target, s.d.opt.DrainTimeout, drainErr)
	}
	s.d.log.Info("unpublished", "volume", redactString(req.GetVolumeId()), "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mlfsdFSType is the type of mlfsd's FUSE mounts in the mount table.
const mlfsdFSType = "fuse.mlfsd"

// checkEphemeral refuses an inline ephemeral volume's attribute the
// administrator did not allow (Options.EphemeralAttributes): whoever may
// create a pod writes these.
func (d *Driver) checkEphemeral(attrs map[string]string) error {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, k8sPrefix) || d.ephemeral[k] {
			continue
		}
		return fmt.Errorf("volume attribute %q: not allowed in an inline ephemeral volume (allowed: %s; an administrator sets the list with --ephemeral-attributes, or uses a PersistentVolume)", k, strings.Join(d.opt.EphemeralAttributes, ", "))
	}
	return nil
}

// isMountpoint reports whether path is a mountpoint in this mount
// namespace (stale FUSE mounts included: stat would fail on those).
func isMountpoint(path string) (bool, error) {
	_, ok, err := mountinfo.Lookup(path)
	return ok, err
}
