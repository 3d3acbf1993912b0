package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mlfsd/mlfsd/csidriver"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/api"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

func newCSICmd(a *app) *cobra.Command {
	var endpoint, nodeID, daemon, name, ossAudience, s3Audience, kubeletRoot, keyFile string
	var drainTimeout time.Duration
	var nasRoots, ephemeral []string
	c := &cobra.Command{
		Use:   "csi --endpoint unix:///csi/csi.sock --node-id NAME [--daemon SOCKET]",
		Short: "Serve the CSI plugin (Identity, Node and Controller services) for Kubernetes",
		Long: `Serve mlfsd's CSI plugin on a unix socket.

NodePublishVolume mounts a volume's channel (volume attributes uri and mode:
input or output) at the pod's target path; NodeUnpublishVolume drains an
output and unmounts. With --daemon, the node daemon on that API socket makes
the mounts (one shared cache for every pod of the node); otherwise they are
served by this process. CreateVolume and DeleteVolume give each dynamically
provisioned volume its own prefix under a StorageClass's uri.

A volume whose attributes name oss-role-arn (with oss-oidc-provider-arn) or
s3-role-arn is mounted with the pod's own short-lived keys: the pod's
service-account token (the CSIDriver object's tokenRequests) is exchanged
for them by AssumeRoleWithOIDC (RRSA) or AssumeRoleWithWebIdentity (IRSA),
and every republish (requiresRepublish) refreshes them on the live mount.
What pods may name is the administrator's: nas:// uris only under a
--nas-root (none by default); inline ephemeral volumes only the
--ephemeral-attributes (uri and mode by default; never shared-cache);
targets only under --kubelet-root. DeleteVolume removes data only under
an ID signed with --controller-key-file (the same key on every controller
replica); without it, onDelete: delete is refused.

See deploy/kubernetes/ for the manifests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			policy, err := nasroots.Parse(nasRoots)
			if err != nil {
				return fmt.Errorf("--nas-root: %w", err)
			}
			var key []byte
			if keyFile != "" {
				if key, err = csidriver.ReadControllerKey(keyFile); err != nil {
					return fmt.Errorf("--controller-key-file: %w", err)
				}
			}
			var m csidriver.Mounter
			if daemon != "" {
				m = api.NewClient(daemon)
			} else {
				n, err := node.New(ctx, node.Options{Settings: a.settings, Log: a.log, Progress: a.stderr, NASRoots: &policy})
				if err != nil {
					return err
				}
				defer func() {
					// Stopping the plugin ends the mounts it serves:
					// drain them as far as the timeout allows.
					cctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
					defer cancel()
					if err := n.Close(cctx); err != nil {
						a.log.Error("closing mounts", "err", err)
					}
				}()
				m = n
			}
			d, err := csidriver.New(csidriver.Options{
				Name: name, Version: version, NodeID: nodeID, Mounter: m,
				Settings: a.settings, DrainTimeout: drainTimeout, Log: a.log,
				OSSAudience: ossAudience, S3Audience: s3Audience,
				NASRoots: policy, EphemeralAttributes: ephemeral, KubeletRoot: kubeletRoot, ControllerKey: key,
			})
			if err != nil {
				return err
			}
			l, err := csidriver.Listen(endpoint)
			if err != nil {
				return err
			}
			a.log.Info("csi plugin serving", "endpoint", endpoint, "driver", name, "node_id", nodeID, "daemon", daemon)
			return d.Serve(ctx, l)
		},
	}
	f := c.Flags()
	f.StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint the kubelet (and sidecars) call")
	f.StringVar(&nodeID, "node-id", "", "this node's ID (the Kubernetes node name)")
	f.StringVar(&daemon, "daemon", "", "the mlfsd daemon's API socket; mounts are made by the daemon (default: by this process)")
	f.StringVar(&name, "driver-name", csidriver.DefaultName, "CSI driver name")
	f.DurationVar(&drainTimeout, "unpublish-drain-timeout", 10*time.Minute,
		"how long NodeUnpublishVolume waits for an output's uploads before unmounting anyway (the rest stays journaled)")
	f.StringVar(&ossAudience, "oss-token-audience", csidriver.DefaultOSSAudience,
		"audience of the pod's service-account token exchanged for an OSS role (RRSA); the CSIDriver object's tokenRequests must ask for it")
	f.StringVar(&s3Audience, "s3-token-audience", csidriver.DefaultS3Audience,
		"audience of the pod's service-account token exchanged for an S3 role (IRSA); the CSIDriver object's tokenRequests must ask for it")
	addNASRootFlag(f, &nasRoots)
	f.StringSliceVar(&ephemeral, "ephemeral-attributes", csidriver.DefaultEphemeralAttributes,
		"the only volume attributes an inline ephemeral volume (which anyone who may create a pod writes) may set: uri, mode and mount options such as upload-concurrency; never shared-cache")
	f.StringVar(&kubeletRoot, "kubelet-root", csidriver.DefaultKubeletRoot, "the kubelet's root directory: publish and unpublish targets must lie under it")
	f.StringVar(&keyFile, "controller-key-file", "", "file holding the controller's key (a Secret's key, at least 16 bytes) that signs provisioned volume IDs; needed for onDelete: delete")
	node.AddFlags(f, &a.settings, node.GroupCache, node.GroupOSS, node.GroupS3, node.GroupHDFS, node.GroupOutput)
	c.MarkFlagRequired("node-id")
	return c
}
