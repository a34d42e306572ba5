package config

import (
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(nil, lookupFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		EmbeddedAddr: "127.0.0.1:9092", DataDir: "./data", HTTPAddr: "127.0.0.1:8080", AdminAddr: "127.0.0.1:8081", MaxTokens: 10000, AuditRetention: 90 * 24 * time.Hour,
		TopicPrefix: "hookstream", Partitions: 12, MaxBody: 1 << 20, AckTimeout: 5 * time.Second, DedupTTL: 168 * time.Hour,
		// The breaker's 30s cooldown is capped at the first retry's delay.
		Delivery: Delivery{Timeout: 15 * time.Second, AllowPrivate: true, BreakerCooldown: 5 * time.Second, MaxSubscriptions: 1000, ExprCPUShare: 0.25, Schedule: []time.Duration{
			5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}},
		Log: Log{Level: "info", Format: "text"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\ngot  %+v\nwant %+v", c, want)
	}
	if !c.Embedded() || c.SeedBrokers()[0] != "127.0.0.1:9092" {
		t.Errorf("SeedBrokers: got %v, want the embedded address", c.SeedBrokers())
	}
}

// TestIngestListenerDefault: on the embedded broker, a development setup,
// the ingest listener takes webhooks from this host only; with brokers,
// from every interface; a listener set is kept either way.
func TestIngestListenerDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"embedded", nil, "127.0.0.1:8080"},
		{"brokers", map[string]string{"HOOKSTREAM_BROKERS": "k1:9092"}, ":8080"},
		{"embedded, set", map[string]string{"HOOKSTREAM_HTTP_ADDR": "0.0.0.0:8080"}, "0.0.0.0:8080"},
		{"brokers, set", map[string]string{"HOOKSTREAM_BROKERS": "k1:9092", "HOOKSTREAM_HTTP_ADDR": "127.0.0.1:9090"}, "127.0.0.1:9090"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(nil, lookupFrom(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.HTTPAddr != tc.want {
				t.Errorf("HTTPAddr: got %q, want %q", c.HTTPAddr, tc.want)
			}
		})
	}
}

func TestLoadEnvThenFlags(t *testing.T) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	RegisterFlags(fs, Common, Topology, Server, Admin)
	if err := fs.Parse([]string{"--partitions", "6"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(fs, lookupFrom(map[string]string{
		"HOOKSTREAM_BROKERS":    "k1:9092, k2:9092",
		"HOOKSTREAM_PARTITIONS": "3",
		"HOOKSTREAM_MAX_BODY":   "2MiB",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Brokers, []string{"k1:9092", "k2:9092"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Brokers: got %v, want %v", got, want)
	}
	if c.Partitions != 6 {
		t.Errorf("Partitions: got %d, want 6 (the flag wins over the environment)", c.Partitions)
	}
	if c.MaxBody != 2<<20 {
		t.Errorf("MaxBody: got %d, want %d", c.MaxBody, 2<<20)
	}
	if c.Delivery.AllowPrivate {
		t.Errorf("AllowPrivate: got true, want false on a real cluster")
	}
	if !c.Delivery.RequireHTTPS {
		t.Errorf("RequireHTTPS: got false, want true on a real cluster")
	}
}

func TestLoadSecretKeys(t *testing.T) {
	key := "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // base64 of 32 bytes
	prev := "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	c, err := Load(nil, lookupFrom(map[string]string{"HOOKSTREAM_SECRET_KEY": key, "HOOKSTREAM_SECRET_KEY_PREVIOUS": prev}))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.SecretKey) != "0123456789abcdef0123456789abcdef" || string(c.SecretKeyPrevious) != "fedcba9876543210fedcba9876543210" {
		t.Errorf("keys: got %q and %q", c.SecretKey, c.SecretKeyPrevious)
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"short", map[string]string{"HOOKSTREAM_SECRET_KEY": "c2hvcnQ="}, "HOOKSTREAM_SECRET_KEY: not base64 of 32 bytes (generate one with: openssl rand -base64 32)"},
		{"not base64", map[string]string{"HOOKSTREAM_SECRET_KEY": "not a key!"}, "HOOKSTREAM_SECRET_KEY: not base64 of 32 bytes"},
		{"previous alone", map[string]string{"HOOKSTREAM_SECRET_KEY_PREVIOUS": prev}, "HOOKSTREAM_SECRET_KEY_PREVIOUS: set without HOOKSTREAM_SECRET_KEY"},
		{"https", map[string]string{"HOOKSTREAM_DELIVERY_REQUIRE_HTTPS": "maybe"}, `HOOKSTREAM_DELIVERY_REQUIRE_HTTPS: invalid boolean "maybe"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(nil, lookupFrom(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: got %v, want it to contain %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "not a key") {
				t.Errorf("error %q repeats the key", err)
			}
		})
	}
}

func TestLoadInstanceID(t *testing.T) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	RegisterFlags(fs, Server)
	env := lookupFrom(map[string]string{"HOOKSTREAM_INSTANCE_ID": "processor-0"})
	c, err := Load(fs, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.InstanceID != "processor-0" {
		t.Errorf("InstanceID from the environment: got %q, want processor-0", c.InstanceID)
	}
	if err := fs.Parse([]string{"--instance-id", "web-1.eu"}); err != nil {
		t.Fatal(err)
	}
	if c, err = Load(fs, env); err != nil {
		t.Fatal(err)
	}
	if c.InstanceID != "web-1.eu" {
		t.Errorf("InstanceID: got %q, want web-1.eu (the flag wins over the environment)", c.InstanceID)
	}
}

func TestLoadReplicationFactor(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		flag []string
		want int16
	}{
		{"default derives from the cluster", nil, nil, 0},
		{"empty derives from the cluster", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": ""}, nil, 0},
		{"zero derives from the cluster", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": "0"}, nil, 0},
		{"environment", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": " 3 "}, nil, 3},
		{"flag wins", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": "3"}, []string{"--replication-factor", "5"}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("topics", pflag.ContinueOnError)
			RegisterFlags(fs, Common, Topology)
			if err := fs.Parse(tt.flag); err != nil {
				t.Fatal(err)
			}
			c, err := Load(fs, lookupFrom(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.ReplicationFactor != tt.want {
				t.Errorf("ReplicationFactor: got %d, want %d", c.ReplicationFactor, tt.want)
			}
		})
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"partitions", map[string]string{"HOOKSTREAM_PARTITIONS": "zero"}, []string{`HOOKSTREAM_PARTITIONS: invalid partition count "zero" (want 1 to 10000)`}},
		{"size", map[string]string{"HOOKSTREAM_MAX_BODY": "huge"}, []string{`HOOKSTREAM_MAX_BODY: invalid size "huge"`}},
		{"duration", map[string]string{"HOOKSTREAM_DEDUP_TTL": "-1h"}, []string{`HOOKSTREAM_DEDUP_TTL: invalid duration "-1h"`}},
		{"schedule", map[string]string{"HOOKSTREAM_DELIVERY_SCHEDULE": "5s,soon"}, []string{`HOOKSTREAM_DELIVERY_SCHEDULE: invalid duration "soon"`}},
		{"address", map[string]string{"HOOKSTREAM_HTTP_ADDR": "8080"}, []string{`HOOKSTREAM_HTTP_ADDR: invalid address "8080" (want host:port)`}},
		{"log", map[string]string{"HOOKSTREAM_LOG_FORMAT": "xml"}, []string{`HOOKSTREAM_LOG_FORMAT: invalid value "xml" (want text, json)`}},
		{"prefix", map[string]string{"HOOKSTREAM_TOPIC_PREFIX": "a/b"}, []string{`HOOKSTREAM_TOPIC_PREFIX: invalid prefix "a/b"`}},
		{"instance id", map[string]string{"HOOKSTREAM_INSTANCE_ID": "web 1"}, []string{`HOOKSTREAM_INSTANCE_ID: invalid instance id "web 1"`}},
		{"replication factor", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": "-1"}, []string{`HOOKSTREAM_REPLICATION_FACTOR: invalid replication factor "-1" (want 1 to 32767, or 0 for min(3, brokers))`}},
		{"replication factor word", map[string]string{"HOOKSTREAM_REPLICATION_FACTOR": "three"}, []string{`HOOKSTREAM_REPLICATION_FACTOR: invalid replication factor "three"`}},
		{"subscription limit", map[string]string{"HOOKSTREAM_MAX_SUBSCRIPTIONS": "0"}, []string{`HOOKSTREAM_MAX_SUBSCRIPTIONS: invalid subscription limit "0" (want a positive number)`}},
		{"expression share", map[string]string{"HOOKSTREAM_EXPR_CPU_SHARE": "0"}, []string{`HOOKSTREAM_EXPR_CPU_SHARE: invalid share "0" (want a number above 0, at most 64, e.g. 0.25)`}},
		{"expression share not a number", map[string]string{"HOOKSTREAM_EXPR_CPU_SHARE": "NaN"}, []string{`HOOKSTREAM_EXPR_CPU_SHARE: invalid share "NaN" (want a number above 0, at most 64, e.g. 0.25)`}},
		{"token", map[string]string{"HOOKSTREAM_ADMIN_ADDR": "0.0.0.0:8081"}, []string{`HOOKSTREAM_ADMIN_TOKEN: required because HOOKSTREAM_ADMIN_ADDR 0.0.0.0:8081 is not a loopback address`}},
		{"advertised address", map[string]string{"HOOKSTREAM_ADMIN_ADVERTISED_ADDR": "8081"}, []string{`HOOKSTREAM_ADMIN_ADVERTISED_ADDR: invalid address "8081" (want host:port)`}},
		{"advertised everywhere", map[string]string{"HOOKSTREAM_ADMIN_ADVERTISED_ADDR": "0.0.0.0:8081"}, []string{`HOOKSTREAM_ADMIN_ADVERTISED_ADDR: "0.0.0.0:8081" names no host (want the host name or address other instances reach)`}},
		{"advertised without host", map[string]string{"HOOKSTREAM_ADMIN_ADVERTISED_ADDR": ":8081"}, []string{`HOOKSTREAM_ADMIN_ADVERTISED_ADDR: ":8081" names no host`}},
		{"trace URL without placeholder", map[string]string{"HOOKSTREAM_TRACE_URL": "http://localhost:16686/trace/"}, []string{`HOOKSTREAM_TRACE_URL: want a URL containing {trace_id}`}},
		{"trace URL not http", map[string]string{"HOOKSTREAM_TRACE_URL": "javascript:alert('{trace_id}')"}, []string{`HOOKSTREAM_TRACE_URL: want an http or https URL with a host`}},
		{"trusted proxies", map[string]string{"HOOKSTREAM_TRUSTED_PROXIES": "10.0.0.0/8, lb.internal"}, []string{`HOOKSTREAM_TRUSTED_PROXIES: invalid network "lb.internal" (want CIDR notation, e.g. 10.0.0.0/8)`}},
		{"several at once", map[string]string{"HOOKSTREAM_PARTITIONS": "-1", "HOOKSTREAM_LOG_LEVEL": "loud"}, []string{"HOOKSTREAM_PARTITIONS:", "HOOKSTREAM_LOG_LEVEL:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(nil, lookupFrom(tt.env))
			if err == nil {
				t.Fatal("got nil error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestAdvertisedAdminAddr(t *testing.T) {
	c, err := Load(nil, lookupFrom(map[string]string{"HOOKSTREAM_ADMIN_ADVERTISED_ADDR": "hookstream-1.internal:8081"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.AdminAdvertisedAddr != "hookstream-1.internal:8081" {
		t.Errorf("AdminAdvertisedAddr: got %q, want hookstream-1.internal:8081", c.AdminAdvertisedAddr)
	}
}

// TestConfigurationReference: the configuration table of
// docs/configuration.md names every setting, and no other.
func TestConfigurationReference(t *testing.T) {
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| variable | default | meaning |\n")
	if !ok {
		t.Fatal("docs/configuration.md: no configuration table (| variable | default | meaning |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var documented []string
	for _, row := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "|"), "|")
		for _, m := range regexp.MustCompile("`(HOOKSTREAM_[A-Z_]+)`").FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	var defined []string
	for _, s := range settings {
		defined = append(defined, s.env)
	}
	slices.Sort(documented)
	slices.Sort(defined)
	for _, env := range defined {
		if _, found := slices.BinarySearch(documented, env); !found {
			t.Errorf("%s: a setting the configuration table of docs/configuration.md does not name", env)
		}
	}
	for _, env := range documented {
		if _, found := slices.BinarySearch(defined, env); !found {
			t.Errorf("%s: in the configuration table of docs/configuration.md, but no setting", env)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	c, err := Load(nil, lookupFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.TrustedProxies != nil {
		t.Errorf("TrustedProxies by default: got %v, want none", c.TrustedProxies)
	}
	c, err = Load(nil, lookupFrom(map[string]string{"HOOKSTREAM_TRUSTED_PROXIES": "10.1.2.3/8, fd00::/8"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	if !slices.Equal(c.TrustedProxies, want) {
		t.Errorf("TrustedProxies: got %v, want %v", c.TrustedProxies, want)
	}
}

// TestDurations: a default written from a duration reads as the settings
// are documented, without zero units.
func TestDurations(t *testing.T) {
	for _, tt := range []struct {
		ds   []time.Duration
		want string
	}{
		{[]time.Duration{DefaultDedupTTL}, "168h"},
		{DefaultSchedule(), "5s,5m,30m,2h,5h,10h,10h"},
		{[]time.Duration{90 * time.Minute, 1500 * time.Millisecond, 10 * time.Second, 2*time.Hour + time.Second}, "1h30m,1.5s,10s,2h0m1s"},
	} {
		if got := durations(tt.ds...); got != tt.want {
			t.Errorf("durations(%v): got %q, want %q", tt.ds, got, tt.want)
		}
	}
}
