// Package monitoring holds mlfsd's monitoring pack: a PodMonitor, alert
// rules (plain and as a PrometheusRule) and a Grafana dashboard. Its test
// checks the rules with promtool, and that every metric the rules and the
// dashboard query is one a node daemon exports, against a real scrape of
// an in-process node that served input and output mounts.
package monitoring

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/mlfsd/mlfsd/backends/oss/ossemu"
	"github.com/mlfsd/mlfsd/backends/oss/ossemu/ossemutest"
	"github.com/mlfsd/mlfsd/internal/testwait"
	"github.com/mlfsd/mlfsd/node"
)

// promtool runs promtool (Debian package prometheus, listed in
// .ci/apt-packages.txt) with args in this directory.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatalf("promtool not found (apt-get install prometheus, or make deps): %v", err)
	}
	out, err := exec.Command("promtool", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestRulesCheckAndFire: promtool accepts the rule file, and its unit
// tests (rules_test.yaml: each alert fires on the series that should raise
// it, with its labels and text) pass.
func TestRulesCheckAndFire(t *testing.T) {
	promtool(t, "check", "rules", "rules.yaml")
	promtool(t, "test", "rules", "rules_test.yaml")
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestPrometheusRuleIsTheRuleFile: the Operator's PrometheusRule holds the
// very groups of rules.yaml, which promtool checks.
func TestPrometheusRuleIsTheRuleFile(t *testing.T) {
	var plain ruleFile
	readYAML(t, "rules.yaml", &plain)
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       ruleFile       `json:"spec"`
	}
	readYAML(t, "prometheusrule.yaml", &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml is a %s %s", pr.APIVersion, pr.Kind)
	}
	if len(plain.Groups) == 0 || !reflect.DeepEqual(plain, pr.Spec) {
		t.Error("prometheusrule.yaml's spec differs from rules.yaml: copy the groups over")
	}
}

// TestScrapeConfigFindsTheDaemon: the PodMonitor selects the DaemonSet's
// pods and names a port of its daemon container, and the pod template's
// scrape annotations name that port's number and the daemon's path.
func TestScrapeConfigFindsTheDaemon(t *testing.T) {
	var pm struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			PodMetricsEndpoints []struct {
				Port        string           `json:"port"`
				Path        string           `json:"path"`
				Interval    string           `json:"interval"`
				Relabelings []map[string]any `json:"relabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	readYAML(t, "podmonitor.yaml", &pm)
	var ds appsv1.DaemonSet
	data, err := os.ReadFile("../kubernetes/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("node.yaml: %v", err)
	}
	if pm.Kind != "PodMonitor" || pm.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("podmonitor.yaml is a %s %s", pm.APIVersion, pm.Kind)
	}
	if len(pm.Spec.Selector.MatchLabels) == 0 {
		t.Error("the PodMonitor selects no labels")
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the PodMonitor selects %s=%s; the DaemonSet's pods have %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if !slices.Contains(pm.Spec.NamespaceSelector.MatchNames, ds.Namespace) {
		t.Errorf("the PodMonitor looks in %v; the DaemonSet is in %s", pm.Spec.NamespaceSelector.MatchNames, ds.Namespace)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("want one endpoint, have %d", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	var port int32
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == ep.Port {
				port = p.ContainerPort
				if !slices.Contains(c.Command, "--metrics-listen=:"+itoa(p.ContainerPort)) {
					t.Errorf("container %s exposes %s:%d but does not serve metrics there: %v", c.Name, p.Name, p.ContainerPort, c.Command)
				}
			}
		}
	}
	if port == 0 {
		t.Fatalf("no container of the DaemonSet has a port named %q", ep.Port)
	}
	a := ds.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != itoa(port) || a["prometheus.io/path"] != ep.Path || ep.Path != "/metrics" {
		t.Errorf("scrape annotations %v; want scrape true, port %d, path /metrics (the PodMonitor's %s)", a, port, ep.Path)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// grafanaVar matches a dashboard variable in a query: $name, ${name},
// ${name:format}, [[name]].
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// expandVars replaces the dashboard's variables with what they stand for
// in a query: a range for Grafana's intervals, a regexp for the others.
func expandVars(q string) string {
	return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
		name := strings.Trim(v, "${}[]")
		name, _, _ = strings.Cut(name, ":")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		case "__range_s", "__interval_ms":
			return "300"
		}
		return ".*"
	})
}

// labelValues matches a template variable's label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)

// dashboardQueries returns every PromQL query of the dashboard (panels,
// rows' panels, template variables), variables expanded, by where it is.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	out := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("dashboard.json panel: %v", err)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q target %s has no query", p.Title, tg.RefID)
				}
				out["panel "+p.Title+" "+tg.RefID] = expandVars(tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
		}
		out["variable "+v.Name] = expandVars(m[1])
	}
	return out
}

// metricNames parses q and returns the metric names its selectors name.
func metricNames(t *testing.T, where, q string) []string {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		t.Errorf("%s: %q: %v", where, q, err)
		return nil
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: %q selects no metric by name", where, q)
			return nil
		}
		names = append(names, name)
		return nil
	})
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, q)
	}
	return names
}

// jwt is a service-account token expiring at exp (the emulator's STS
// checks its expiry, not its signature).
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"iss": "https://oidc.test", "sub": "system:serviceaccount:ns:sa", "aud": "sts.amazonaws.com", "exp": exp.Unix()})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + enc([]byte("sig"))
}

// scrape GETs url and returns the families by name, with a histogram's
// series names (_bucket, _sum, _count) too.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for name, mf := range fams {
		out[name] = mf
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = mf
			}
		}
	}
	return out
}

// TestPackQueriesExportedMetrics: every query of the rules and the
// dashboard parses as PromQL and names only metrics a node exports, as
// seen in a real scrape of its /metrics after it served an input mount
// (with a pod's role credentials, through a shared cache tier, one read
// failing in the store) and an output mount (a file written and uploaded).
func TestPackQueriesExportedMetrics(t *testing.T) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	const role = "arn:aws:iam::123456789012:role/trainer"
	_, ep, root := ossemutest.StartBucket(t, "bkt", ossemu.Options{STSDuration: time.Hour, STSRoles: []string{role}})
	os.MkdirAll(filepath.Join(root, "bkt", "d"), 0o755)
	for _, f := range []string{"a", "gone"} {
		os.WriteFile(filepath.Join(root, "bkt", "d", f), []byte("file "+f), 0o644)
	}
	keyFile := filepath.Join(t.TempDir(), "tier.key")
	os.WriteFile(keyFile, []byte("test-tier-key-0123456789abcdef\n"), 0o600)

	set := node.Defaults()
	set.Cache.Dir = t.TempDir()
	set.Cache.MemoryBytes = 64 << 20
	set.Cache.FreeFloorBytes = 0
	set.Output.StagingDir = t.TempDir()
	set.Shared.KeyFile = keyFile
	set.Identity.S3STSEndpoint = ep
	n, err := node.New(t.Context(), node.Options{Settings: set, Version: "v0.0.0-test",
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	in, out := t.TempDir(), t.TempDir()
	dst := t.TempDir()
	_, err = n.Mount(t.Context(), node.MountRequest{URI: "s3://bkt/d/?endpoint=" + ep, Target: in, ReadOnly: true,
		Options:     map[string]string{"shared-cache": "nas://" + t.TempDir() + "/"},
		Credentials: node.Credentials{S3RoleARN: role, S3WebIdentityToken: jwt(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Mount(t.Context(), node.MountRequest{URI: "nas://" + dst + "/", Target: out}); err != nil {
		t.Fatal(err)
	}
	// Readers and writers in other processes: a FUSE server must not
	// serve its own process.
	if b, err := exec.Command("cat", filepath.Join(in, "a")).CombinedOutput(); err != nil || string(b) != "file a" {
		t.Fatalf("read: %q, %v", b, err)
	}
	// Listed (a lookup alone asks the store for the name, issue 31), then
	// gone from the store: the read's GET fails NoSuchKey.
	if b, err := exec.Command("ls", in).CombinedOutput(); err != nil {
		t.Fatalf("ls: %v %s", err, b)
	}
	os.Remove(filepath.Join(root, "bkt", "d", "gone"))
	if b, err := exec.Command("cat", filepath.Join(in, "gone")).CombinedOutput(); err == nil {
		t.Fatalf("a read of an object gone from the store succeeded: %q", b)
	}
	if b, err := exec.Command("sh", "-c", "echo checkpoint > "+filepath.Join(out, "ckpt")).CombinedOutput(); err != nil {
		t.Fatalf("write: %v %s", err, b)
	}
	testwait.EventuallyNoError(t, func() error {
		_, err := os.Stat(filepath.Join(dst, "ckpt"))
		return err
	}, "the checkpoint to be uploaded")

	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	var exported map[string]*dto.MetricFamily
	// The upload's counters are written when its end is recorded, just
	// after the object lands.
	testwait.Eventually(t, func() bool {
		exported = scrape(t, srv.URL+"/metrics")
		return exported["mlfsd_writeback_uploads_total"] != nil
	}, "the upload to be counted")

	queries := dashboardQueries(t)
	var rules ruleFile
	readYAML(t, "rules.yaml", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	used := map[string]bool{}
	for where, q := range queries {
		for _, name := range metricNames(t, where, q) {
			used[name] = true
			if exported[name] == nil {
				t.Errorf("%s queries %s, which the daemon does not export", where, name)
			}
		}
	}
	// What the pack must watch (the list), so that a query
	// dropped by mistake is noticed.
	for _, name := range []string{node.MetricBuildInfo, node.MetricBackendLatency + "_bucket", node.MetricBackendErrors,
		"mlfsd_upload_oldest_pending_age_seconds", "mlfsd_mount_write_bytes_total", node.MetricCredentialsExpiry,
		node.MetricCacheHitBytes, node.MetricBackendReadBytes, node.MetricUploadPendingBytes, node.MetricUploadFailures,
		"mlfsd_shared_cache_fallbacks_total", node.MetricCacheEvictions, node.MetricFUSELatency + "_bucket"} {
		if !used[name] {
			t.Errorf("nothing in the pack queries %s", name)
		}
	}
	// The series the scrape showed are the ones this test meant to make.
	if mf := exported[node.MetricCredentialsExpiry]; mf == nil || len(mf.GetMetric()) != 1 {
		t.Errorf("%s: %v", node.MetricCredentialsExpiry, mf)
	}
	if mf := exported[node.MetricBackendErrors]; mf == nil || !slices.ContainsFunc(mf.GetMetric(), func(m *dto.Metric) bool {
		return slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "code" && l.GetValue() == "NoSuchKey" })
	}) {
		t.Errorf("%s has no code=NoSuchKey series after a read of a removed object: %v", node.MetricBackendErrors, mf)
	}
}
