// Package kubernetes holds mlfsd's Kubernetes manifests. There is no
// cluster in CI: this test decodes every manifest strictly with the
// Kubernetes API types and checks the fields a working deployment needs.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"

	"github.com/mlfsd/mlfsd/csidriver"
)

// objects is every object of every manifest, by kind and name.
type objects map[string]any

func key(kind, name string) string { return kind + "/" + name }

// load decodes every YAML document of every manifest, strictly: an unknown
// or misspelt field fails the test.
func load(t *testing.T) objects {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := objects{}
	sep := regexp.MustCompile(`(?m)^---\s*$`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range sep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "storage.k8s.io/v1 CSIDriver":
				obj = &storagev1.CSIDriver{}
			case "storage.k8s.io/v1 StorageClass":
				obj = &storagev1.StorageClass{}
			case "apps/v1 DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "v1 PersistentVolume":
				obj = &corev1.PersistentVolume{}
			case "v1 PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			case "v1 Pod":
				obj = &corev1.Pod{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "rbac.authorization.k8s.io/v1 ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s %s): %v", f, i, meta.Kind, meta.Metadata.Name, err)
			}
			k := key(meta.Kind, meta.Metadata.Name)
			if _, dup := out[k]; dup {
				t.Fatalf("%s: %s defined twice", f, k)
			}
			out[k] = obj
		}
	}
	return out
}

func stripComments(doc string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func get[T any](t *testing.T, objs objects, kind, name string) T {
	t.Helper()
	o, ok := objs[key(kind, name)]
	if !ok {
		t.Fatalf("no %s %q in the manifests", kind, name)
	}
	v, ok := o.(T)
	if !ok {
		t.Fatalf("%s %q: decoded as %T", kind, name, o)
	}
	return v
}

func TestCSIDriver(t *testing.T) {
	objs := load(t)
	d := get[*storagev1.CSIDriver](t, objs, "CSIDriver", csidriver.DefaultName)
	if d.Spec.AttachRequired == nil || *d.Spec.AttachRequired {
		t.Error("attachRequired must be false: the driver has no ControllerPublishVolume")
	}
	if d.Spec.PodInfoOnMount == nil || !*d.Spec.PodInfoOnMount {
		t.Error("podInfoOnMount must be true (inline volumes are told apart by it)")
	}
	modes := map[storagev1.VolumeLifecycleMode]bool{}
	for _, m := range d.Spec.VolumeLifecycleModes {
		modes[m] = true
	}
	if !modes[storagev1.VolumeLifecyclePersistent] || !modes[storagev1.VolumeLifecycleEphemeral] {
		t.Errorf("volumeLifecycleModes %v: want Persistent and Ephemeral", d.Spec.VolumeLifecycleModes)
	}
	// Per-pod identity: the pod's token for each STS, and republishes
	// that refresh the keys it is exchanged for.
	if d.Spec.RequiresRepublish == nil || !*d.Spec.RequiresRepublish {
		t.Error("requiresRepublish must be true: a republish refreshes a pod's keys, and gives a restored mount its credentials back")
	}
	auds := map[string]bool{}
	for _, tr := range d.Spec.TokenRequests {
		auds[tr.Audience] = true
		if tr.ExpirationSeconds != nil && *tr.ExpirationSeconds < 600 {
			t.Errorf("tokenRequests %s: expirationSeconds %d is below Kubernetes' minimum of 600", tr.Audience, *tr.ExpirationSeconds)
		}
	}
	for _, a := range []string{csidriver.DefaultOSSAudience, csidriver.DefaultS3Audience} {
		if !auds[a] {
			t.Errorf("tokenRequests %v: no audience %s", d.Spec.TokenRequests, a)
		}
	}
}

// TestPodIdentityPods: the RRSA and IRSA examples run as a service
// account of their own and name a role on every volume, with attributes
// the plugin accepts, and no Secret.
func TestPodIdentityPods(t *testing.T) {
	objs := load(t)
	for name, roleAttr := range map[string]string{"train-rrsa": csidriver.AttrOSSRoleARN, "train-irsa": csidriver.AttrS3RoleARN} {
		pod := get[*corev1.Pod](t, objs, "Pod", name)
		get[*corev1.ServiceAccount](t, objs, "ServiceAccount", pod.Spec.ServiceAccountName)
		c := container(t, pod.Spec, "train")
		for _, path := range []string{"/ml/input/data/train", "/ml/output/model"} {
			v := volume(t, pod.Spec, mountOf(t, c, path).Name)
			if v.CSI == nil || v.CSI.Driver != csidriver.DefaultName {
				t.Errorf("%s %s: not an inline %s volume", name, path, csidriver.DefaultName)
				continue
			}
			if v.CSI.VolumeAttributes[roleAttr] == "" || v.CSI.NodePublishSecretRef != nil {
				t.Errorf("%s %s: want %s and no secret: %+v", name, path, roleAttr, v.CSI)
			}
			if err := csidriver.CheckAttributes(v.CSI.VolumeAttributes); err != nil {
				t.Errorf("%s %s: %v", name, path, err)
			}
		}
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q", name)
	return corev1.Volume{}
}

// mountOf returns the container's mount of the volume at path.
func mountOf(t *testing.T, c corev1.Container, path string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m
		}
	}
	t.Fatalf("container %s mounts nothing at %s", c.Name, path)
	return corev1.VolumeMount{}
}

// flagValue returns the value of --name=value in a command line.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestNodeDaemonSet(t *testing.T) {
	objs := load(t)
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet", "mlfsd-node")
	spec := ds.Spec.Template.Spec
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Error("the selector does not match the pod template's labels")
	}

	// The registrar tells the kubelet where the plugin's socket is.
	reg := container(t, spec, "node-driver-registrar")
	pluginDir := volume(t, spec, "plugin-dir")
	wantSock := "/var/lib/kubelet/plugins/" + csidriver.DefaultName + "/csi.sock"
	if pluginDir.HostPath == nil || pluginDir.HostPath.Path != filepath.Dir(wantSock) {
		t.Errorf("plugin-dir: want hostPath %s, got %+v", filepath.Dir(wantSock), pluginDir.VolumeSource)
	}
	if v, _ := flagValue(reg.Args, "kubelet-registration-path"); v != wantSock {
		t.Errorf("registrar --kubelet-registration-path %q, want %q", v, wantSock)
	}
	if m := mountOf(t, reg, "/csi"); m.Name != "plugin-dir" {
		t.Errorf("registrar /csi is volume %s", m.Name)
	}
	if m := mountOf(t, reg, "/registration"); volume(t, spec, m.Name).HostPath.Path != "/var/lib/kubelet/plugins_registry" {
		t.Error("registrar /registration is not the kubelet's plugins_registry")
	}

	daemon := container(t, spec, "mlfsd-daemon")
	plugin := container(t, spec, "mlfsd-csi")
	if len(daemon.Command) < 2 || !contains(daemon.Command, "daemon") {
		t.Errorf("mlfsd-daemon command %v does not run `mlfsd daemon`", daemon.Command)
	}
	if !contains(plugin.Command, "csi") {
		t.Errorf("mlfsd-csi command %v does not run `mlfsd csi`", plugin.Command)
	}
	sock, ok := flagValue(daemon.Command, "socket")
	if !ok {
		t.Fatal("mlfsd-daemon has no --socket")
	}
	if d, _ := flagValue(plugin.Command, "daemon"); d != sock {
		t.Errorf("mlfsd-csi --daemon %q, but the daemon listens on %q", d, sock)
	}
	// Both containers see the socket through the same volume.
	dm, pm := mountOf(t, daemon, filepath.Dir(sock)), mountOf(t, plugin, filepath.Dir(sock))
	if dm.Name != pm.Name {
		t.Errorf("the daemon socket dir is volume %s in the daemon and %s in the plugin", dm.Name, pm.Name)
	}
	if ep, _ := flagValue(plugin.Command, "endpoint"); ep != "unix:///csi/csi.sock" {
		t.Errorf("mlfsd-csi --endpoint %q", ep)
	}
	if mountOf(t, plugin, "/csi").Name != "plugin-dir" {
		t.Error("mlfsd-csi does not serve its socket in plugin-dir")
	}
	if id, _ := flagValue(plugin.Command, "node-id"); id != "$(NODE_NAME)" {
		t.Errorf("mlfsd-csi --node-id %q, want $(NODE_NAME)", id)
	}
	var nodeName bool
	for _, e := range plugin.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME is not spec.nodeName")
	}

	// Mounts made in the containers must reach the pods: privileged,
	// /dev/fuse, Bidirectional propagation of the kubelet directory.
	for _, c := range []corev1.Container{daemon, plugin} {
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			t.Errorf("%s is not privileged (Bidirectional propagation requires it)", c.Name)
		}
		m := mountOf(t, c, "/var/lib/kubelet")
		if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
			t.Errorf("%s: /var/lib/kubelet propagation %v, want Bidirectional", c.Name, m.MountPropagation)
		}
		if v := volume(t, spec, m.Name); v.HostPath == nil || v.HostPath.Path != "/var/lib/kubelet" {
			t.Errorf("%s: /var/lib/kubelet is not the host's", c.Name)
		}
	}
	fuse := volume(t, spec, mountOf(t, daemon, "/dev/fuse").Name)
	if fuse.HostPath == nil || fuse.HostPath.Path != "/dev/fuse" || fuse.HostPath.Type == nil || *fuse.HostPath.Type != corev1.HostPathCharDev {
		t.Errorf("/dev/fuse volume %+v: want hostPath /dev/fuse of type CharDevice", fuse.VolumeSource)
	}
	for _, f := range []string{"state-dir", "cache-dir", "staging-dir"} {
		dir, ok := flagValue(daemon.Command, f)
		if !ok {
			t.Errorf("mlfsd-daemon has no --%s", f)
			continue
		}
		if !mountedFromHost(spec, daemon, dir) {
			t.Errorf("mlfsd-daemon --%s %s is not on a hostPath volume: it would not survive a restart", f, dir)
		}
	}
}

// mountedFromHost reports whether path lies in a hostPath volume of c.
func mountedFromHost(spec corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/") {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil {
					return true
				}
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// checkSecretRef checks that a secret reference names the template Secret
// and that the Secret has the keys the driver reads.
func checkSecretRef(t *testing.T, objs objects, what string, ref *corev1.SecretReference) {
	t.Helper()
	if ref == nil {
		t.Errorf("%s: no nodePublishSecretRef", what)
		return
	}
	s := get[*corev1.Secret](t, objs, "Secret", ref.Name)
	if ref.Namespace != "" && ref.Namespace != s.Namespace {
		t.Errorf("%s: secret %s/%s, but the Secret is in %s", what, ref.Namespace, ref.Name, s.Namespace)
	}
	for _, k := range []string{csidriver.SecretOSSAccessKeyID, csidriver.SecretOSSAccessKeySecret} {
		if _, ok := s.StringData[k]; !ok {
			t.Errorf("Secret %s has no key %s", s.Name, k)
		}
	}
}

func TestStaticDatasetVolume(t *testing.T) {
	objs := load(t)
	pv := get[*corev1.PersistentVolume](t, objs, "PersistentVolume", "imagenet-train")
	c := pv.Spec.CSI
	if c == nil || c.Driver != csidriver.DefaultName {
		t.Fatalf("PV imagenet-train: not a volume of %s: %+v", csidriver.DefaultName, pv.Spec.PersistentVolumeSource)
	}
	if c.VolumeHandle == "" {
		t.Error("PV imagenet-train: empty volumeHandle")
	}
	if got := c.VolumeAttributes["uri"]; got != "oss://my-bucket/datasets/imagenet/train/" {
		t.Errorf("PV uri %q", got)
	}
	if c.VolumeAttributes["mode"] != "input" || !c.ReadOnly {
		t.Errorf("PV mode %q readOnly %v: want a read-only input", c.VolumeAttributes["mode"], c.ReadOnly)
	}
	if err := csidriver.CheckAttributes(c.VolumeAttributes); err != nil {
		t.Errorf("PV imagenet-train attributes: %v", err)
	}
	checkSecretRef(t, objs, "PV imagenet-train", c.NodePublishSecretRef)
	pvc := get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim", "imagenet-train")
	if pvc.Spec.VolumeName != pv.Name || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "" {
		t.Errorf("PVC imagenet-train does not bind the PV statically (volumeName %q, storageClassName %v)", pvc.Spec.VolumeName, pvc.Spec.StorageClassName)
	}
}

func TestStorageClass(t *testing.T) {
	objs := load(t)
	sc := get[*storagev1.StorageClass](t, objs, "StorageClass", "mlfsd-output")
	if sc.Provisioner != csidriver.DefaultName {
		t.Errorf("provisioner %q", sc.Provisioner)
	}
	p := sc.Parameters
	if p["mode"] != "output" || !strings.HasSuffix(p["uri"], "/") || p["onDelete"] != "retain" {
		t.Errorf("parameters %v: want an output base directory URI, onDelete retain", p)
	}
	attrs := map[string]string{}
	for k, v := range p {
		if k != "onDelete" {
			attrs[k] = v
		}
	}
	if err := csidriver.CheckAttributes(attrs); err != nil {
		t.Errorf("StorageClass parameters: %v", err)
	}
	for _, k := range []string{"provisioner", "controller-delete", "node-publish"} {
		if p["csi.storage.k8s.io/"+k+"-secret-name"] == "" || p["csi.storage.k8s.io/"+k+"-secret-namespace"] == "" {
			t.Errorf("no %s secret reference", k)
		}
		get[*corev1.Secret](t, objs, "Secret", p["csi.storage.k8s.io/"+k+"-secret-name"])
	}
	dep := get[*appsv1.Deployment](t, objs, "Deployment", "mlfsd-controller")
	spec := dep.Spec.Template.Spec
	prov := container(t, spec, "csi-provisioner")
	plugin := container(t, spec, "mlfsd-csi")
	if mountOf(t, prov, "/csi").Name != mountOf(t, plugin, "/csi").Name {
		t.Error("the provisioner and the plugin do not share the socket dir")
	}
	if spec.ServiceAccountName == "" {
		t.Error("the controller runs without its service account")
	}
	get[*corev1.ServiceAccount](t, objs, "ServiceAccount", spec.ServiceAccountName)
}

func TestTrainingPods(t *testing.T) {
	objs := load(t)
	pod := get[*corev1.Pod](t, objs, "Pod", "resnet-train")
	c := container(t, pod.Spec, "train")
	train := mountOf(t, c, "/ml/input/data/train")
	if !train.ReadOnly {
		t.Error("/ml/input/data/train is mounted writable")
	}
	if v := volume(t, pod.Spec, train.Name); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "imagenet-train" {
		t.Errorf("/ml/input/data/train is not the imagenet-train claim: %+v", v.VolumeSource)
	}
	model := mountOf(t, c, "/ml/output/model")
	v := volume(t, pod.Spec, model.Name)
	if v.PersistentVolumeClaim == nil {
		t.Fatalf("/ml/output/model is not a claim: %+v", v.VolumeSource)
	}
	pvc := get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName)
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "mlfsd-output" {
		t.Errorf("claim %s is not of class mlfsd-output", pvc.Name)
	}
	get[*corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim", "imagenet-train")

	// An inline volume may set only what the node's plugin allows.
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet", "mlfsd-node")
	allowedFlag, ok := flagValue(container(t, ds.Spec.Template.Spec, "mlfsd-csi").Command, "ephemeral-attributes")
	if !ok {
		allowedFlag = strings.Join(csidriver.DefaultEphemeralAttributes, ",")
	}
	allowed := strings.Split(allowedFlag, ",")
	inline := get[*corev1.Pod](t, objs, "Pod", "resnet-train-inline")
	c = container(t, inline.Spec, "train")
	for path, mode := range map[string]string{"/ml/input/data/train": "input", "/ml/output/model": "output"} {
		v := volume(t, inline.Spec, mountOf(t, c, path).Name)
		if v.CSI == nil || v.CSI.Driver != csidriver.DefaultName {
			t.Errorf("%s: not an inline %s volume: %+v", path, csidriver.DefaultName, v.VolumeSource)
			continue
		}
		if v.CSI.VolumeAttributes["mode"] != mode {
			t.Errorf("%s: mode %q, want %s", path, v.CSI.VolumeAttributes["mode"], mode)
		}
		if err := csidriver.CheckAttributes(v.CSI.VolumeAttributes); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for k := range v.CSI.VolumeAttributes {
			if !contains(allowed, k) {
				t.Errorf("%s: inline attribute %q is not in the plugin's --ephemeral-attributes %s", path, k, allowedFlag)
			}
		}
		checkSecretRef(t, objs, fmt.Sprintf("inline volume %s", v.Name), &corev1.SecretReference{Name: v.CSI.NodePublishSecretRef.Name, Namespace: inline.Namespace})
	}
}
