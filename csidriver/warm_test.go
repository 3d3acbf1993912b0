package csidriver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
	"github.com/mlfsd/mlfsd/node/nasroots"
)

// TestPublishWarms: an input volume with warm: "true" is published at
// once and its data is then fetched into the node's cache in the
// background, through that mount, its progress in the node's cache
// usage; warm takes only "true" or "false", and only on an input.
func TestPublishWarms(t *testing.T) {
	store := t.TempDir()
	data := filepath.Join(store, "data")
	os.MkdirAll(filepath.Join(data, "sub"), 0o755)
	var total int64
	for i, name := range []string{"a.bin", "sub/b.bin", "sub/c.bin"} {
		b := []byte(strings.Repeat(string(rune('a'+i)), 700_000+i))
		os.WriteFile(filepath.Join(data, name), b, 0o644)
		total += int64(len(b))
	}
	policy, err := nasroots.Parse([]string{store + ":rw"})
	if err != nil {
		t.Fatal(err)
	}
	p := startTrustPlugin(t, Options{NASRoots: policy})
	ctx := t.Context()
	uri := "nas://" + data + "/"

	for _, tc := range []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{AttrURI: uri, AttrWarm: "yes"}, `"yes" is neither "true" nor "false"`},
		{map[string]string{AttrURI: "nas://" + store + "/", AttrMode: ModeOutput, AttrWarm: "true"}, "only an input volume"},
	} {
		mode := csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		if tc.attrs[AttrMode] == ModeOutput {
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		}
		_, err := p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: p.podTarget(t, "pod", "bad"),
			VolumeContext: tc.attrs, VolumeCapability: fsCap(mode)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("publish with %v: %v; want InvalidArgument saying %q", tc.attrs, err, tc.want)
		}
	}

	target := p.podTarget(t, "pod", "data")
	_, err = p.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target,
		VolumeContext:    map[string]string{AttrURI: uri, AttrWarm: "true"},
		VolumeCapability: fsCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)})
	if err != nil {
		t.Fatal(err)
	}
	var st node.WarmStatus
	testwait.Eventually(t, func() bool {
		for _, w := range p.n.CacheUsage().Warms {
			if w.Target == target {
				st = w
				return w.Ended()
			}
		}
		return false
	}, "the warm-up of %s to end", target)
	if st.State != node.WarmDone || st.Files != 3 || st.BytesFetched != total || st.URI != uri {
		t.Errorf("warm-up at publish: %+v; want %s's 3 files, %d bytes fetched", st, uri, total)
	}
	if _, err := p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
}
