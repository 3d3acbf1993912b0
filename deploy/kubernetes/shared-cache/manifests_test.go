// Package sharedcache holds the Kubernetes manifests of the shared cache tier: an
// in-cluster MinIO for the tier's store and a node daemon reading through
// it (docs/SHARED-CACHE.md). There is no cluster in CI: this test decodes
// every manifest strictly with the Kubernetes API types, checks that the
// objects refer to each other consistently, and that every flag the daemon
// is given is a flag of `mlfsd daemon` as built from this tree.
package sharedcache

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// load decodes every document of every manifest, strictly (an unknown or
// misspelt field fails), by kind/name.
func load(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string]any{}
	sep := regexp.MustCompile(`(?m)^---\s*$`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range sep.Split(string(data), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "apps/v1 StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "apps/v1 DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "batch/v1 Job":
				obj = &batchv1.Job{}
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s %s): %v", f, i, meta.Kind, meta.Metadata.Name, err)
			}
			if meta.Metadata.Namespace != "mlfsd" {
				t.Errorf("%s %s: namespace %q, want mlfsd", meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace)
			}
			k := meta.Kind + "/" + meta.Metadata.Name
			if _, dup := out[k]; dup {
				t.Fatalf("%s: %s defined twice", f, k)
			}
			out[k] = obj
		}
	}
	return out
}

func get[T any](t *testing.T, objs map[string]any, k string) T {
	t.Helper()
	v, ok := objs[k].(T)
	if !ok {
		t.Fatalf("no %s in the manifests (or of another type)", k)
	}
	return v
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

// secretKeys checks that every secret a container takes exists with the
// keys it names.
func secretKeys(t *testing.T, objs map[string]any, c corev1.Container) {
	t.Helper()
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			get[*corev1.Secret](t, objs, "Secret/"+ef.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		s := get[*corev1.Secret](t, objs, "Secret/"+ref.Name)
		if _, ok := s.StringData[ref.Key]; !ok {
			t.Errorf("container %s: env %s takes key %q, which secret %s lacks", c.Name, e.Name, ref.Key, ref.Name)
		}
	}
}

// TestStore: MinIO's Service selects its StatefulSet's pods on the port
// MinIO listens on; the bucket Job reaches that Service and makes the
// bucket and prefix the daemons name.
func TestStore(t *testing.T) {
	objs := load(t)
	svc := get[*corev1.Service](t, objs, "Service/mlfsd-cache-store")
	sts := get[*appsv1.StatefulSet](t, objs, "StatefulSet/mlfsd-cache-store")
	if sts.Spec.ServiceName != svc.Name {
		t.Errorf("StatefulSet serviceName %q, Service %q", sts.Spec.ServiceName, svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if sts.Spec.Template.Labels[k] != v || sts.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("Service selects %s=%s; the StatefulSet's pods are %v", k, v, sts.Spec.Template.Labels)
		}
	}
	minio := sts.Spec.Template.Spec.Containers[0]
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != minio.Ports[0].Name || minio.Ports[0].ContainerPort != 9000 {
		t.Errorf("Service ports %+v do not reach MinIO's %+v", svc.Spec.Ports, minio.Ports)
	}
	if addr, _ := flagValue(minio.Args, "address"); addr != ":9000" {
		t.Errorf("MinIO listens on %q, its port is 9000", addr)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || minio.VolumeMounts[0].Name != sts.Spec.VolumeClaimTemplates[0].Name ||
		minio.VolumeMounts[0].MountPath != minio.Args[1] {
		t.Errorf("MinIO serves %q; its volume is %+v", minio.Args[1], minio.VolumeMounts)
	}
	secretKeys(t, objs, minio)
	job := get[*batchv1.Job](t, objs, "Job/mlfsd-cache-bucket")
	mc := job.Spec.Template.Spec.Containers[0]
	secretKeys(t, objs, mc)
	script := strings.Join(mc.Command, " ")
	for _, want := range []string{
		"http://" + svc.Name + ".mlfsd.svc:9000",
		"mc mb --ignore-existing tier/mlfsd-cache",
		"--prefix tier/blocks/", "--prefix tier/fetching/",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("bucket job does not say %q:\n%s", want, script)
		}
	}
}

// TestDaemonFlags: the daemon's command line names only flags that
// `mlfsd daemon` has (built from this tree and asked for its help), and
// its tier is the bucket the Job makes, on the store's Service.
func TestDaemonFlags(t *testing.T) {
	objs := load(t)
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/mlfsd-node-shared-cache")
	if ds.Spec.Selector == nil || ds.Spec.Template.Labels["app.kubernetes.io/name"] != ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("DaemonSet selector %v does not select its pods %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	var daemon corev1.Container
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "mlfsd-daemon" {
			daemon = c
		}
	}
	if len(daemon.Command) < 3 || daemon.Command[0] != "mlfsd" {
		t.Fatalf("no mlfsd daemon container: %+v", ds.Spec.Template.Spec.Containers)
	}
	secretKeys(t, objs, daemon)

	bin := filepath.Join(t.TempDir(), "mlfsd")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/mlfsd/mlfsd/cmd/mlfsd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/mlfsd: %v\n%s", err, out)
	}
	help, err := exec.CommandContext(t.Context(), bin, "daemon", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("mlfsd daemon --help: %v\n%s", err, help)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if !known["shared-cache"] || !known["log-format"] {
		t.Fatalf("could not read the flags of mlfsd daemon --help:\n%s", help)
	}
	sub := false
	for _, a := range daemon.Command[1:] {
		if a == "daemon" {
			sub = true
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !known[name] {
			t.Errorf("the daemon's argument %q is not a flag of mlfsd daemon", a)
		}
	}
	if !sub {
		t.Errorf("command %q runs no daemon", daemon.Command)
	}

	tier, ok := flagValue(daemon.Command, "shared-cache")
	u, err := url.Parse(tier)
	if !ok || err != nil || u.Scheme != "s3" || u.Host != "mlfsd-cache" || !strings.HasSuffix(u.Path, "/") {
		t.Errorf("--shared-cache=%q: want a directory of the bucket the Job makes, s3://mlfsd-cache/.../", tier)
	}
	if u != nil && strings.TrimPrefix(u.Path, "/") != "tier/" {
		t.Errorf("--shared-cache=%q: the lifecycle rules cover tier/blocks/ and tier/fetching/", tier)
	}
	keyFile(t, objs, ds, daemon)
	var endpoint string
	for _, e := range daemon.Env {
		if e.Name == "AWS_ENDPOINT_URL_S3" {
			endpoint = e.Value
		}
	}
	if endpoint != "http://mlfsd-cache-store.mlfsd.svc:9000" {
		t.Errorf("AWS_ENDPOINT_URL_S3 = %q; the store's Service is mlfsd-cache-store.mlfsd.svc:9000", endpoint)
	}
}

// keyFile checks the daemon's --shared-cache-key-file: a file of a volume
// the container mounts, that volume a Secret of the manifests (mode 0400),
// and the file one of its keys.
func keyFile(t *testing.T, objs map[string]any, ds *appsv1.DaemonSet, daemon corev1.Container) {
	t.Helper()
	path, ok := flagValue(daemon.Command, "shared-cache-key-file")
	if !ok {
		t.Fatal("the daemon has --shared-cache but no --shared-cache-key-file: it does not start")
	}
	var mount *corev1.VolumeMount
	for i, m := range daemon.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			mount = &daemon.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--shared-cache-key-file=%s lies in no volume the daemon mounts", path)
	}
	var secretName string
	var mode *int32
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.Secret != nil {
			secretName, mode = v.Secret.SecretName, v.Secret.DefaultMode
		}
	}
	if secretName == "" {
		t.Fatalf("volume %s holding the key is not a Secret", mount.Name)
	}
	if mode == nil || *mode&0o077 != 0 {
		t.Errorf("the key's Secret volume has mode %v; want it readable by its owner alone", mode)
	}
	secret, ok := objs["Secret/"+secretName].(*corev1.Secret)
	if !ok {
		t.Fatalf("no Secret %s in the manifests", secretName)
	}
	item := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	if _, ok := secret.StringData[item]; !ok {
		if _, ok := secret.Data[item]; !ok {
			t.Errorf("Secret %s has no key %q, the file --shared-cache-key-file names", secretName, item)
		}
	}
}
