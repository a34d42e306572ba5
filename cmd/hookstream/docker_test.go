package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// The deployment files under docker/ cannot be started here (no Docker
// engine in CI), so these tests check what can be checked without one:
// the compose file names settings the binary knows and files that exist,
// Prometheus scrapes the admin port of every role, and every metric the
// Grafana dashboard queries is exported by a real `hookstream run`.

// dockerDir is docker/ at the repository root; tests run in cmd/hookstream.
const dockerDir = "../../docker"

// composeFile is the part of docker/compose.yaml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Command     []string       `yaml:"command"`
	Environment map[string]any `yaml:"environment"`
	Deploy      struct {
		Replicas  *int `yaml:"replicas"`
		Resources struct {
			Limits struct {
				Memory string `yaml:"memory"`
			} `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
	Volumes   []string `yaml:"volumes"`
	Ports     []string `yaml:"ports"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	Profiles []string `yaml:"profiles"`
}

// hookstream reports whether the service runs the image of docker/Dockerfile.
func (s composeService) hookstream() bool {
	return s.Build != nil && s.Build.Dockerfile == "docker/Dockerfile"
}

// env returns the service's environment with ${VAR:-default} expanded to
// its default, as `docker compose up` does with nothing set, and each
// ${VAR:?message} (a variable compose refuses to start without, printing
// the message) to requiredValue, as a user who set it. A variable without
// a default or a message is an error: the file must work without a .env.
func (s composeService) env() (map[string]string, error) {
	out := make(map[string]string, len(s.Environment))
	for k, v := range s.Environment {
		raw := fmt.Sprint(v)
		if v == nil {
			raw = ""
		}
		var missing []string
		out[k] = interpolation.ReplaceAllStringFunc(raw, func(m string) string {
			sub := interpolation.FindStringSubmatch(m)
			switch {
			case strings.HasSuffix(sub[2], "?"):
				return requiredValue
			case sub[2] == "":
				missing = append(missing, sub[1])
			}
			return sub[3]
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("%s: ${%s} has no default", k, strings.Join(missing, "}, ${"))
		}
	}
	return out, nil
}

// requiredValue stands for the value a user gives a ${VAR:?message}.
const requiredValue = "3f6c0a9e5b1d4c7e8a2f9b0d1e3c5a7f"

var interpolation = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(:?[-?])?([^}]*)\}`)

// required returns the message of each ${VAR:?message} in the service's
// environment, by variable.
func (s composeService) required() map[string]string {
	out := make(map[string]string)
	for _, v := range s.Environment {
		for _, sub := range interpolation.FindAllStringSubmatch(fmt.Sprint(v), -1) {
			if sub[2] == ":?" {
				out[sub[1]] = sub[3]
			}
		}
	}
	return out
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dockerDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker/compose.yaml: %v", err)
	}
	return c
}

// knownSettings returns the HOOKSTREAM_* variables the binary documents in
// `run --help`: its own flags and the global ones.
func knownSettings(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(hookstreamBin, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("hookstream run --help: %v\n%s", err, out)
	}
	known := make(map[string]bool)
	for _, m := range regexp.MustCompile(`env (HOOKSTREAM_[A-Z0-9_]+)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	for _, must := range []string{"HOOKSTREAM_BROKERS", "HOOKSTREAM_ADMIN_ADDR", "HOOKSTREAM_DATA_DIR"} {
		if !known[must] {
			t.Fatalf("run --help names no %s; the usage text changed shape:\n%s", must, out)
		}
	}
	return known
}

// TestComposeFile checks docker/compose.yaml: the Kafka cluster, the
// hookstream roles with settings the binary accepts, and the files it
// mounts.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	for _, name := range []string{"kafka-1", "kafka-2", "kafka-3", "topics", "ingest", "processor", "dispatcher", "prometheus", "grafana", "jaeger"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s: missing", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("kafka", func(t *testing.T) {
		script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "kafka-local.sh"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`KAFKA_VERSION="\$\{KAFKA_VERSION:-([0-9.]+)\}"`).FindSubmatch(script)
		if m == nil {
			t.Fatal("scripts/kafka-local.sh sets no default KAFKA_VERSION")
		}
		tested := "apache/kafka:" + string(m[1]) // the version the tests run against
		ids := make(map[string]string)
		cluster := ""
		for _, name := range []string{"kafka-1", "kafka-2", "kafka-3"} {
			s := c.Services[name]
			env, err := s.env()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if s.Image != tested {
				t.Errorf("%s: image %q, want %s, the version the tests run against", name, s.Image, tested)
			}
			if env["KAFKA_PROCESS_ROLES"] != "broker,controller" {
				t.Errorf("%s: KAFKA_PROCESS_ROLES %q, want broker,controller", name, env["KAFKA_PROCESS_ROLES"])
			}
			if prev, dup := ids[env["KAFKA_NODE_ID"]]; dup {
				t.Errorf("%s: KAFKA_NODE_ID %s already used by %s", name, env["KAFKA_NODE_ID"], prev)
			}
			ids[env["KAFKA_NODE_ID"]] = name
			if cluster == "" {
				cluster = env["CLUSTER_ID"]
			} else if env["CLUSTER_ID"] != cluster {
				t.Errorf("%s: CLUSTER_ID %q, want the same on every node (%q)", name, env["CLUSTER_ID"], cluster)
			}
			voters := strings.Split(env["KAFKA_CONTROLLER_QUORUM_VOTERS"], ",")
			for _, n := range []string{"kafka-1", "kafka-2", "kafka-3"} {
				if !slices.ContainsFunc(voters, func(v string) bool { return strings.Contains(v, "@"+n+":") }) {
					t.Errorf("%s: KAFKA_CONTROLLER_QUORUM_VOTERS %q does not list %s", name, env["KAFKA_CONTROLLER_QUORUM_VOTERS"], n)
				}
			}
			if !strings.Contains(env["KAFKA_ADVERTISED_LISTENERS"], "PLAINTEXT://"+name+":9092") {
				t.Errorf("%s: KAFKA_ADVERTISED_LISTENERS %q, want PLAINTEXT://%s:9092 for the compose network", name, env["KAFKA_ADVERTISED_LISTENERS"], name)
			}
			for k, want := range map[string]string{
				"KAFKA_DEFAULT_REPLICATION_FACTOR":               "3",
				"KAFKA_MIN_INSYNC_REPLICAS":                      "2",
				"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "3",
				"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
				"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "2",
			} {
				if env[k] != want {
					t.Errorf("%s: %s %q, want %s", name, k, env[k], want)
				}
			}
			if s.Healthcheck.Disable || len(s.Healthcheck.Test) == 0 {
				t.Errorf("%s: no healthcheck; the hookstream services wait for it", name)
			}
		}
		if len(ids) != 3 {
			t.Errorf("node ids %v, want 3 distinct", ids)
		}
	})

	t.Run("hookstream", func(t *testing.T) {
		known := knownSettings(t)
		brokers := []string{"kafka-1:9092", "kafka-2:9092", "kafka-3:9092"}
		var names []string
		for name, s := range c.Services {
			if s.hookstream() {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, want := range []string{"dispatcher", "ingest", "processor", "topics"} {
			if !slices.Contains(names, want) {
				t.Errorf("service %s does not build docker/Dockerfile", want)
			}
		}
		for _, name := range names {
			s := c.Services[name]
			env, err := s.env()
			if err != nil {
				t.Errorf("%s: environment: %v", name, err)
				continue
			}
			for k := range env {
				if strings.HasPrefix(k, "HOOKSTREAM_") && !known[k] {
					t.Errorf("%s: %s is not a hookstream setting (run --help names %d)", name, k, len(known))
				}
			}
			// The values must pass hookstream's own validation.
			if _, err := config.Load(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
				t.Errorf("%s: hookstream rejects its environment: %v", name, err)
			}
			if len(s.Command) > 0 && s.Command[0] == "sink" {
				continue // the development subscriber talks to no broker
			}
			if got := strings.Split(env["HOOKSTREAM_BROKERS"], ","); !slices.Equal(got, brokers) {
				t.Errorf("%s: HOOKSTREAM_BROKERS %q, want %s", name, env["HOOKSTREAM_BROKERS"], strings.Join(brokers, ","))
			}
			if env["HOOKSTREAM_PARTITIONS"] != "12" {
				t.Errorf("%s: HOOKSTREAM_PARTITIONS %q, want 12 (the same everywhere)", name, env["HOOKSTREAM_PARTITIONS"])
			}
			if dir := s.Build.Context; dir != ".." {
				t.Errorf("%s: build context %q, want .. (the repository root)", name, dir)
			}
			if _, err := os.Stat(filepath.Join(dockerDir, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
		}

		roles := map[string]int{"ingest": 2, "processor": 2, "dispatcher": 1}
		for role, replicas := range roles {
			s := c.Services[role]
			got := 1
			if s.Deploy.Replicas != nil {
				got = *s.Deploy.Replicas
			}
			if got != replicas {
				t.Errorf("%s: %d replicas, want %d", role, got, replicas)
			}
			if want := []string{"run", "--roles", role}; !slices.Equal(s.Command, want) {
				t.Errorf("%s: command %q, want %q", role, s.Command, want)
			}
			env, _ := s.env()
			if host, port, err := net.SplitHostPort(env["HOOKSTREAM_ADMIN_ADDR"]); err != nil || host == "127.0.0.1" || host == "localhost" || port != "8081" {
				t.Errorf("%s: HOOKSTREAM_ADMIN_ADDR %q, want 0.0.0.0:8081 so Prometheus can scrape it", role, env["HOOKSTREAM_ADMIN_ADDR"])
			}
			if hc := strings.Join(s.Healthcheck.Test, " "); s.Healthcheck.Disable || !strings.Contains(hc, "127.0.0.1:8081/readyz") {
				t.Errorf("%s: healthcheck %q, want one on /readyz at the admin port", role, hc)
			}
			if dep := s.DependsOn["topics"].Condition; dep != "service_completed_successfully" {
				t.Errorf("%s: depends_on topics %q, want service_completed_successfully", role, dep)
			}
			for _, k := range []string{"kafka-1", "kafka-2", "kafka-3"} {
				if dep := s.DependsOn[k].Condition; dep != "service_healthy" {
					t.Errorf("%s: depends_on %s %q, want service_healthy", role, k, dep)
				}
			}
		}
		if env, _ := c.Services["ingest"].env(); env["HOOKSTREAM_HTTP_ADDR"] != ":8080" {
			t.Errorf("ingest: HOOKSTREAM_HTTP_ADDR %q, want :8080", env["HOOKSTREAM_HTTP_ADDR"])
		}
		if want := []string{"topics", "create"}; !slices.Equal(c.Services["topics"].Command, want) {
			t.Errorf("topics: command %q, want %q", c.Services["topics"].Command, want)
		}
		// Two processors sharing one state directory would fight over its
		// Pebble locks: with replicas, /data must be a per-container volume.
		for _, v := range c.Services["processor"].Volumes {
			if src, dst, ok := strings.Cut(v, ":"); ok && strings.HasPrefix(dst, "/data") {
				t.Errorf("processor: volume %q shares %s between replicas; use an anonymous volume", v, src)
			}
		}
	})

	t.Run("tracing", func(t *testing.T) {
		jaeger := c.Services["jaeger"]
		if !strings.HasPrefix(jaeger.Image, "jaegertracing/jaeger:2.") {
			t.Errorf("jaeger: image %q, want jaegertracing/jaeger:2.x (v2, all in one)", jaeger.Image)
		}
		if cmd := strings.Join(jaeger.Command, " "); !strings.Contains(cmd, "receivers.otlp.protocols.http.endpoint=0.0.0.0:4318") {
			t.Errorf("jaeger: command %q, want its OTLP/HTTP receiver on 0.0.0.0:4318, reachable from the other containers", cmd)
		}
		if !slices.Contains(jaeger.Ports, "127.0.0.1:16686:16686") {
			t.Errorf("jaeger: ports %q, want the UI on 127.0.0.1:16686", jaeger.Ports)
		}
		for _, role := range []string{"ingest", "processor", "dispatcher"} {
			env, _ := c.Services[role].env()
			if got := env["OTEL_EXPORTER_OTLP_ENDPOINT"]; got != "http://jaeger:4318" {
				t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q, want http://jaeger:4318", role, got)
			}
			if got := env["OTEL_SERVICE_NAME"]; got != "hookstream-"+role {
				t.Errorf("%s: OTEL_SERVICE_NAME %q, want hookstream-%s", role, got, role)
			}
			if got := env["HOOKSTREAM_TRACE_URL"]; got != "http://localhost:16686/trace/{trace_id}" {
				t.Errorf("%s: HOOKSTREAM_TRACE_URL %q, want Jaeger's trace page on the published port", role, got)
			}
		}
	})

	t.Run("mounts", func(t *testing.T) {
		for name, s := range c.Services {
			for _, v := range s.Volumes {
				src, _, ok := strings.Cut(v, ":")
				switch {
				case !ok: // anonymous volume
				case strings.HasPrefix(src, "/") || strings.HasPrefix(src, "~"):
					t.Errorf("%s: volume %q mounts a host path outside the repository", name, v)
				case strings.HasPrefix(src, "."):
					if _, err := os.Stat(filepath.Join(dockerDir, src)); err != nil {
						t.Errorf("%s: volume %q: %v", name, v, err)
					}
				default:
					if _, ok := c.Volumes[src]; !ok {
						t.Errorf("%s: named volume %q is not declared under volumes", name, src)
					}
				}
			}
		}
	})
}

// mountTarget maps a path inside a container of service s to the file in
// the repository its bind mounts provide, or "" if none does.
func mountTarget(s composeService, inContainer string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue
		}
		if rel, err := filepath.Rel(parts[1], inContainer); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(dockerDir, parts[0], rel)
		}
	}
	return ""
}

// TestPrometheusConfig checks that docker/prometheus/prometheus.yml parses
// and scrapes /metrics on the admin port of every hookstream role.
func TestPrometheusConfig(t *testing.T) {
	c := readCompose(t)
	prom := c.Services["prometheus"]
	var configFile string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configFile = v
		}
	}
	if configFile == "" {
		configFile = "/etc/prometheus/prometheus.yml" // the image's default
	}
	path := mountTarget(prom, configFile)
	if want := filepath.Join(dockerDir, "prometheus", "prometheus.yml"); path != want {
		t.Fatalf("prometheus: %s comes from %q, want %s mounted", configFile, path, want)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
			DNSSD       []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
			Static []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(false)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := make(map[string]bool)
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			continue
		}
		for _, sd := range sc.DNSSD {
			if sd.Port != 8081 || (sd.Type != "" && sd.Type != "A") {
				continue
			}
			for _, n := range sd.Names {
				scraped[n] = true
			}
		}
		for _, st := range sc.Static {
			for _, target := range st.Targets {
				if host, port, err := net.SplitHostPort(target); err == nil && port == "8081" {
					scraped[host] = true
				}
			}
		}
	}
	for _, role := range []string{"ingest", "processor", "dispatcher"} {
		if !scraped[role] {
			t.Errorf("prometheus.yml: no scrape of %s:8081/metrics (DNS A records cover every replica)", role)
		}
		env, _ := c.Services[role].env()
		if _, port, _ := net.SplitHostPort(env["HOOKSTREAM_ADMIN_ADDR"]); port != "8081" {
			t.Errorf("%s: admin port %q, but Prometheus scrapes 8081", role, port)
		}
	}
}

// TestDashboardProvisioning checks the Grafana wiring: the datasource
// points at the prometheus service and the dashboard provider's path is
// where compose mounts the dashboard.
func TestDashboardProvisioning(t *testing.T) {
	c := readCompose(t)
	grafana := c.Services["grafana"]
	if mountTarget(grafana, "/etc/grafana/provisioning/datasources/prometheus.yaml") == "" {
		t.Fatalf("grafana: docker/grafana/provisioning is not mounted at /etc/grafana/provisioning")
	}

	var ds struct {
		Datasources []struct {
			Name, Type, URL, UID string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(dockerDir, "grafana/provisioning/datasources/prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources: got %+v, want one prometheus datasource at http://prometheus:9090", ds.Datasources)
	}
	if _, ok := c.Services["prometheus"]; !ok {
		t.Errorf("the datasource names host prometheus but compose has no such service")
	}

	var dp struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(dockerDir, "grafana/provisioning/dashboards/hookstream.yaml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers: got %+v, want one of type file", dp.Providers)
	}
	dir := dp.Providers[0].Options.Path
	if got, want := mountTarget(grafana, dir+"/hookstream.json"), filepath.Join(dockerDir, "grafana/dashboards/hookstream.json"); got != want {
		t.Errorf("grafana: the provider reads %s/hookstream.json, which compose fills from %q, want %s", dir, got, want)
	}
	env, _ := grafana.env()
	if home := env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		if f := mountTarget(grafana, home); f == "" {
			t.Errorf("grafana: home dashboard %s is not mounted", home)
		} else if _, err := os.Stat(f); err != nil {
			t.Errorf("grafana: home dashboard: %v", err)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// pendingMetrics are queried by the dashboard but not exported yet; their
// panels show no data until they are. An entry that appears in /metrics
// fails the test so it is removed here.
var pendingMetrics = map[string]string{}

// failureMetrics are queried by the dashboard but have series only once
// the failure they count happens, which a healthy run never shows.
var failureMetrics = map[string]string{
	"hookstream_connect_errors_total": "kprom: a failed connection to a broker",
}

// dashboardExprs returns every panel's query expressions, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dockerDir, "grafana/dashboards/hookstream.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string  `json:"type"`
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("hookstream.json: %v", err)
	}
	if dash.UID == "" {
		t.Errorf("hookstream.json: no uid; provisioning needs a stable one")
	}
	out := make(map[string][]string)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" || p.Type == "text" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			if _, dup := out[p.Title]; dup {
				t.Errorf("panel %q: title used twice", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: empty query", p.Title)
				}
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
		}
	}
	walk(dash.Panels)
	return out
}

// metricName matches hookstream's metrics, kprom's (also hookstream_) and
// the Go and process collectors'. Label names never start with these.
var metricName = regexp.MustCompile(`\b((?:hookstream|go|process)_[a-zA-Z0-9_]+)\b`)

// exposition parses the families of a text exposition: name -> type.
// Families with no series are not printed by client_golang at all.
func exposition(body string) map[string]string {
	out := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// exported reports whether the dashboard's metric m is in families: a
// family itself, or a histogram's (summary's) series.
func exported(families map[string]string, m string) bool {
	if _, ok := families[m]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(m, suffix); ok {
			if typ := families[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
				return true
			}
		}
	}
	return false
}

// TestDashboardQueriesExportedMetrics runs `hookstream run` on the embedded
// broker, drives one webhook through ingest, processing and two
// subscriptions (one answering 204, one 500 with a one-step retry schedule,
// so every delivery family gets a series) and a topic subscription whose
// topic is deleted, and checks that every metric the
// Grafana dashboard queries is in /metrics.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	t.Parallel()
	exprs := dashboardExprs(t)
	used := make(map[string][]string) // metric -> panel titles
	for title, es := range exprs {
		for _, e := range es {
			for _, m := range metricName.FindAllStringSubmatch(e, -1) {
				if !slices.Contains(used[m[1]], title) {
					used[m[1]] = append(used[m[1]], title)
				}
			}
		}
	}
	if len(used) == 0 {
		t.Fatal("the dashboard queries no hookstream metric")
	}

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()

	d := newEmbedded(t)
	d.extra = map[string]string{
		"HOOKSTREAM_DELIVERY_SCHEDULE": "200ms", // one quick retry, then the delivery DLQ
		"HOOKSTREAM_DELIVERY_TIMEOUT":  "5s",
	}
	p := d.run(t, "hookstream run")

	for _, url := range []string{ok.URL + "/hook", failing.URL + "/hook"} {
		cmd := exec.Command(hookstreamBin, "subscriptions", "add", "--url", url, "--from", "earliest", "--output", "json")
		cmd.Env = environ(map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr})
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hookstream subscriptions add --url %s: %v\n%s", url, err, out)
		}
	}

	// A topic subscription whose topic is gone: it is stopped, counted.
	cmd := exec.Command(hookstreamBin, "subscriptions", "add", "--topic", "dashboard-gone", "--from", "earliest")
	cmd.Env = environ(map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hookstream subscriptions add --topic: %v\n%s", err, out)
	}
	if _, err := d.kafka.Admin(t).DeleteTopics(context.Background(), "dashboard-gone"); err != nil {
		t.Fatalf("delete dashboard-gone: %v", err)
	}

	d.mustAccept(t, "dashboard-1", `{"type":"push"}`)
	if status, resp := d.postGitHub(t, "dashboard-1", `{"type":"push"}`); status != http.StatusOK || resp["status"] != "duplicate" {
		t.Errorf("second POST of dashboard-1: got %d %v, want 200 duplicate (fast path)", status, resp)
	}
	waitProcessed(t, d.kafka, p, 30*time.Second)

	// The delivery series appear once the dispatcher has delivered the
	// event to one subscriber and dead-lettered it for the other.
	var families map[string]string
	var missing []string
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		p.mustBeAlive(t)
		status, body, err := httpGet("http://" + d.adminAddr + "/metrics")
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("/metrics: got %d", status)
		}
		families = exposition(body)
		missing = missing[:0]
		for m := range used {
			_, pending := pendingMetrics[m]
			if _, failure := failureMetrics[m]; !pending && !failure && !exported(families, m) {
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("not in /metrics yet: %s", strings.Join(missing, ", "))
		}
		return nil
	})

	var names []string
	for name, typ := range families {
		if strings.HasPrefix(name, "hookstream_") {
			names = append(names, name+" ("+typ+")")
		}
	}
	sort.Strings(names)
	t.Logf("hookstream families in /metrics (%d):\n  %s", len(names), strings.Join(names, "\n  "))
	var queried []string
	for m, titles := range used {
		queried = append(queried, m+" <- "+strings.Join(titles, "; "))
	}
	sort.Strings(queried)
	t.Logf("metrics the dashboard queries (%d):\n  %s", len(queried), strings.Join(queried, "\n  "))

	for m, what := range pendingMetrics {
		switch {
		case exported(families, m):
			t.Errorf("%s is exported now: remove it from pendingMetrics", m)
		case len(used[m]) > 0:
			t.Logf("NOT EXPORTED YET: %s, queried by %q: %s", m, used[m], what)
		default:
			t.Errorf("pendingMetrics lists %s, which the dashboard does not query", m)
		}
	}
	if code := p.stop(t, 20*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM: got %d, want 0", code)
	}
}

// TestComposeForNewcomers checks what a newcomer meets in the Compose
// deployment and docs/deployment.md: no default admin token (compose
// refuses to start without one and names the variable), the console on a
// published admin port of a role that serves it, said in the docs with the
// memory the stack needs (the sum of its limits, each hookstream role's at
// least its bound in RELIABILITY.md), and the demo sink reachable with no
// setting changed.
func TestComposeForNewcomers(t *testing.T) {
	c := readCompose(t)
	doc, err := os.ReadFile("../../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{"ingest", "processor", "dispatcher"}

	t.Run("admin token", func(t *testing.T) {
		for _, role := range roles {
			msg, ok := c.Services[role].required()["HOOKSTREAM_ADMIN_TOKEN"]
			if !ok || !strings.Contains(msg, "HOOKSTREAM_ADMIN_TOKEN") {
				t.Errorf("%s: HOOKSTREAM_ADMIN_TOKEN is not ${HOOKSTREAM_ADMIN_TOKEN:?message naming it} (message %q): compose must refuse to start without a token", role, msg)
			}
			if strings.Contains(fmt.Sprint(c.Services[role].Environment["HOOKSTREAM_ADMIN_TOKEN"]), "$(") {
				t.Errorf("%s: the message holds $(, which compose reads as interpolation", role)
			}
		}
	})

	t.Run("console", func(t *testing.T) {
		var published []string
		for _, role := range roles {
			s := c.Services[role]
			env, _ := s.env()
			_, adminPort, _ := net.SplitHostPort(env["HOOKSTREAM_ADMIN_ADDR"])
			for _, p := range s.Ports {
				parts := strings.Split(p, ":")
				if len(parts) != 3 || parts[2] != adminPort {
					continue
				}
				published = append(published, role)
				if parts[0] != "127.0.0.1" {
					t.Errorf("%s: admin port published as %q, want on 127.0.0.1 only", role, p)
				}
				if s.Deploy.Replicas != nil && *s.Deploy.Replicas != 1 {
					t.Errorf("%s: admin port %q published on a fixed host port by %d replicas", role, p, *s.Deploy.Replicas)
				}
				url := "http://localhost:" + parts[1] + "/ui/"
				if !strings.Contains(string(doc), url) {
					t.Errorf("docs/deployment.md: no %s, where compose publishes the console (%s's admin listener)", url, role)
				}
			}
		}
		if len(published) != 1 {
			t.Errorf("roles publishing their admin listener's port (%s): %q, want exactly one, the console's", "HOOKSTREAM_ADMIN_ADDR", published)
		}
	})

	t.Run("memory", func(t *testing.T) {
		bounds := reliabilityBounds(t)
		var total int64
		for _, name := range slices.Sorted(maps.Keys(c.Services)) {
			s := c.Services[name]
			if len(s.Profiles) > 0 || name == "topics" {
				continue // started on demand, or done before the roles start
			}
			limit, err := memoryBytes(s.Deploy.Resources.Limits.Memory)
			if err != nil {
				t.Errorf("%s: deploy.resources.limits.memory %q: %v", name, s.Deploy.Resources.Limits.Memory, err)
				continue
			}
			replicas := 1
			if s.Deploy.Replicas != nil {
				replicas = *s.Deploy.Replicas
			}
			total += int64(replicas) * limit
			if bound, ok := bounds[name]; ok && limit < bound {
				t.Errorf("%s: memory limit %d MiB, below its bound in RELIABILITY.md (%d MiB)", name, limit>>20, bound>>20)
			}
		}
		for _, role := range roles {
			if _, ok := bounds[role]; !ok {
				t.Errorf("RELIABILITY.md: no bound for %s in Processes", role)
			}
		}
		gib := strconv.FormatFloat(float64(total)/(1<<30), 'f', -1, 64)
		if !strings.Contains(string(doc), gib+" GiB") {
			t.Errorf("docs/deployment.md: the services' memory limits add up to %s GiB, which it does not say", gib)
		}
	})

	t.Run("image", func(t *testing.T) {
		// deployment.md runs the image alone with -p 8080:8080: its ingest
		// listener must take connections from outside the container, which
		// the embedded broker's loopback default would not.
		raw, err := os.ReadFile(filepath.Join(dockerDir, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		addr := ""
		if m := regexp.MustCompile(`(?m)^ENV HOOKSTREAM_HTTP_ADDR=(\S+)$`).FindSubmatch(raw); m != nil {
			addr = string(m[1])
		}
		if !strings.HasPrefix(addr, ":") && !strings.HasPrefix(addr, "0.0.0.0:") {
			t.Errorf("docker/Dockerfile: ENV HOOKSTREAM_HTTP_ADDR %q, want a listener on every interface, :8080", addr)
		}
		if !strings.Contains(string(doc), "docker run --rm -p 8080:8080") {
			t.Errorf("docs/deployment.md: no docker run --rm -p 8080:8080, the image alone")
		}
	})

	t.Run("demo sink", func(t *testing.T) {
		sink, ok := c.Services["sink"]
		if !ok || !slices.Contains(sink.Profiles, "demo") {
			t.Fatalf("no sink service in the demo profile")
		}
		if !slices.Contains(sink.Command, "0.0.0.0:9000") {
			t.Errorf("sink: command %q, want it listening on 0.0.0.0:9000 (http://sink:9000/)", sink.Command)
		}
		// http://sink:9000/ is plain http to a private address: the
		// dispatcher must deliver there, and the CLI and the admin API
		// (on every role) take the URL.
		for _, name := range []string{"cli", "ingest", "processor", "dispatcher"} {
			env, _ := c.Services[name].env()
			cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if cfg.Delivery.RequireHTTPS {
				t.Errorf("%s: HOOKSTREAM_DELIVERY_REQUIRE_HTTPS %q: http://sink:9000/ is refused", name, env["HOOKSTREAM_DELIVERY_REQUIRE_HTTPS"])
			}
			if name == "dispatcher" && !cfg.Delivery.AllowPrivate {
				t.Errorf("dispatcher: HOOKSTREAM_DELIVERY_ALLOW_PRIVATE %q: the sink's private address is refused", env["HOOKSTREAM_DELIVERY_ALLOW_PRIVATE"])
			}
		}
		if !strings.Contains(string(doc), "--profile demo") || !strings.Contains(string(doc), "http://sink:9000/") {
			t.Errorf("docs/deployment.md: does not show the demo profile (--profile demo) and its subscriber http://sink:9000/")
		}
	})
}

// reliabilityBounds returns the peak resident set RELIABILITY.md's
// Processes table allows each role.
func reliabilityBounds(t *testing.T) map[string]int64 {
	t.Helper()
	raw, err := os.ReadFile("../../RELIABILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, m := range regexp.MustCompile(`(?m)^\| (ingest|processor|dispatcher) \| (\d+) MiB`).FindAllStringSubmatch(string(raw), -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out[m[1]] = n << 20
	}
	return out
}

// memoryBytes parses a compose memory size: 512M, 1G, 1.5g, 448m.
func memoryBytes(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("no limit")
	}
	units := map[byte]float64{'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}
	num, unit := s, 1.0
	if u, ok := units[strings.ToLower(s)[len(s)-1]]; ok {
		num, unit = s[:len(s)-1], u
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	return int64(f * unit), nil
}
