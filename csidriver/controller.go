package csidriver

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/backends"
	"github.com/mlfsd/mlfsd/backends/all"
	"github.com/mlfsd/mlfsd/node"
)

// controller is the CSI Controller service: dynamic provisioning of one
// prefix per volume under a StorageClass's base URI. There is nothing to
// attach, so CONTROLLER_PUBLISH_UNPUBLISH is not advertised.
type controller struct {
	csi.UnimplementedControllerServer
	d *Driver
}

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

// checkVolumeName refuses names that are not one path element: the name
// becomes the volume's prefix under the base.
func checkVolumeName(name string) error {
	switch {
	case name == "":
		return errors.New("name is required")
	case name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: must be one path element (no '/', not . or ..)", name)
	}
	return nil
}

// CreateVolume gives the volume its own prefix <uri><name>/ under the
// class's base uri and creates it in the store (a directory, or an OSS
// marker), so that an input mount of the new, empty volume works. The
// volume ID is derived from the name, so creating a name again returns the
// same volume. Capacity is not tracked (a store prefix has none): the
// volume reports capacity 0, "unknown".
func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if err := checkVolumeName(name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume_capabilities are required", name)
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if err := checkCapability(vc); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", name, err)
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume content sources (snapshots, clones) are not supported", name)
	}
	params := req.GetParameters()
	base, err := parseAttributes(params, ParamOnDelete)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameters: %v", name, err)
	}
	if !base.uri.IsDir() {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameter %q: %s is not a directory URI (end it with '/')", name, AttrURI, base.uri)
	}
	policy := params[ParamOnDelete]
	switch policy {
	case "":
		policy = policyRetain
	case policyRetain, policyDelete:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameter %q: %q is neither %q nor %q", name, ParamOnDelete, policy, policyRetain, policyDelete)
	}
	if policy == policyDelete && c.d.opt.ControllerKey == nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameter %s: %s needs the controller's key (--controller-key-file), which proves at DeleteVolume that this controller made the volume", name, ParamOnDelete, policyDelete)
	}
	// The controller creates the prefix and, with onDelete: delete, will
	// remove it: a nas:// base must be a read-write root.
	if base.uri, err = c.d.opt.NASRoots.Check(base.uri, true); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameter %q: %v", name, AttrURI, err)
	}
	vu := base.uri.Join(name)

	set, err := c.d.opt.Settings.WithMountOptions(base.options)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: StorageClass parameters: %v", name, err)
	}
	b, err := c.open(ctx, base.uri, set.Backend, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if dm, ok := backends.As[backends.DirMaker](b); ok {
		if err := dm.MakeDir(ctx, name); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: create %s: %v", name, vu, err)
		}
	}

	vctx := map[string]string{}
	for k, v := range params {
		if k != ParamOnDelete && !strings.HasPrefix(k, k8sPrefix) {
			vctx[k] = v
		}
	}
	vctx[AttrURI] = vu.String()
	if _, ok := vctx[AttrAllowEmpty]; !ok {
		// The volume was made just now, so it is empty: the check that an
		// input holds something is for data that should already be there.
		vctx[AttrAllowEmpty] = "true"
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      volumeID(c.d.opt.ControllerKey, policy, vu),
		CapacityBytes: 0,
		VolumeContext: vctx,
	}}, nil
}

// DeleteVolume keeps the data of a volume provisioned with onDelete: retain
// (the default) and removes everything under the prefix of one provisioned
// with onDelete: delete, when its ID carries this controller's MAC. IDs
// this controller did not sign succeed without deleting anything (there is
// nothing of ours to delete), as does a prefix already gone.
func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	p, ok := parseVolumeID(id)
	if !ok || p.policy == policyRetain {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if !p.signedBy(c.d.opt.ControllerKey) {
		// Not made by this controller (or under another key): whoever
		// wrote the ID chose the prefix. Keep the data, and say so.
		c.d.log.Warn("not deleting the data of a volume whose ID this controller did not sign (--controller-key-file); the data stays in the store",
			"volume", redactString(id))
		return &csi.DeleteVolumeResponse{}, nil
	}
	vu, err := c.d.opt.NASRoots.Check(p.uri, true)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: %v", id, err)
	}
	trimmed := strings.TrimSuffix(vu.Path, "/")
	if trimmed == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: refusing to delete the root of a store", id)
	}
	parent := vu
	parent.Path = strings.TrimSuffix(path.Dir(trimmed), "/") + "/"
	name := path.Base(trimmed)
	b, err := c.open(ctx, parent, c.d.opt.Settings.Backend, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := removeAll(ctx, b, name); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: delete the data under %s: %v", id, vu, err)
	}
	c.d.log.Info("deleted a volume's data", "volume", id, "uri", vu.String())
	return &csi.DeleteVolumeResponse{}, nil
}

// removeAll deletes dir and everything under it, deepest first. A missing
// dir is not an error.
func removeAll(ctx context.Context, b backends.Backend, dir string) error {
	tok := ""
	for {
		page, err := b.List(ctx, backends.ListOptions{Prefix: dir + "/", Token: tok})
		if errors.Is(err, backends.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s/: %w", dir, err)
		}
		for _, o := range page.Objects {
			if o.IsDir {
				if err := removeAll(ctx, b, o.Key); err != nil {
					return err
				}
				continue
			}
			if err := b.Delete(ctx, o.Key); err != nil && !errors.Is(err, backends.ErrNotExist) {
				return fmt.Errorf("delete %s: %w", o.Key, err)
			}
		}
		for _, p := range page.Prefixes {
			if err := removeAll(ctx, b, p); err != nil {
				return err
			}
		}
		if page.NextToken == "" {
			break
		}
		tok = page.NextToken
	}
	if err := b.Delete(ctx, dir+"/"); err != nil && !errors.Is(err, backends.ErrNotExist) {
		return fmt.Errorf("delete %s/: %w", dir, err)
	}
	return nil
}

// ValidateVolumeCapabilities confirms filesystem capabilities of a volume
// this driver provisioned; other IDs are NotFound.
func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: volume_capabilities are required", id)
	}
	if _, ok := parseVolumeID(id); !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s: not a volume provisioned by %s", id, c.d.opt.Name)
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if err := checkCapability(vc); err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// open opens the store of directory URI u with the request's secrets.
func (c *controller) open(ctx context.Context, u backends.URI, opt all.Options, secrets map[string]string) (backends.Backend, error) {
	cr, err := credentials(secrets)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if opt, err = node.BackendOptions(ctx, cr, u, opt, c.d.opt.Settings.Identity); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "open %s: %v", u, err)
	}
	b, _, err := all.Open(ctx, u, opt, c.d.log)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "open %s: %v", u, err)
	}
	return b, nil
}
