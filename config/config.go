// Package config holds hookstream's typed configuration: defaults, then
// HOOKSTREAM_* environment variables, then command-line flags, validated at
// once with every problem named by its variable. It owns parsing and
// validation only; it opens no connection and starts nothing.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Config is the whole configuration of a hookstream process.
type Config struct {
	// Brokers are the Kafka seed brokers. Default empty: the embedded broker.
	Brokers []string
	// EmbeddedAddr is the embedded broker's listener. Default 127.0.0.1:9092.
	EmbeddedAddr string
	// DataDir holds the embedded broker's log (kafka/) and state (state/). Default ./data.
	DataDir string
	// SourcesFile is the YAML file of sources, which package ingest reads.
	// Default empty: every source accepted unverified.
	SourcesFile string
	// HTTPAddr is the ingest listener. Default 127.0.0.1:8080 on the
	// embedded broker, a development setup; :8080 with Brokers.
	HTTPAddr string
	// TrustedProxies are the networks of proxies in front of the ingest
	// listener whose X-Forwarded-For names the client. Default none.
	TrustedProxies []netip.Prefix
	// AdminAddr is the admin listener. Default 127.0.0.1:8081.
	AdminAddr string
	// AdminAdvertisedAddr is where other instances reach the admin
	// listener to forward story queries. Default empty: AdminAddr, a
	// listener on every interface reached at the address the broker sees.
	AdminAdvertisedAddr string
	// AdminToken is the bearer token of /api/*, always an admin (the
	// bootstrap of access tokens). Default empty; required off loopback.
	AdminToken string
	// MaxTokens is how many access tokens may exist; creating one more is
	// refused. Default 10000.
	MaxTokens int
	// AuditRetention is how long the audit trail is kept. Default
	// topics.DefaultAuditRetention, 90 days (2160h).
	AuditRetention time.Duration
	// TraceURL is the link template of an event's trace, an http(s) URL
	// containing {trace_id} (tracing.Link). Default empty: no link.
	TraceURL string
	// TopicPrefix prefixes every topic, group and transactional id. Default hookstream.
	TopicPrefix string
	// Partitions of ingest, events and changelog. Default 12.
	Partitions int32
	// ReplicationFactor of every topic hookstream creates; min.insync.replicas
	// is one less (at least 1). Default 0: min(3, brokers in the cluster).
	ReplicationFactor int16
	// MaxBody is the largest accepted webhook body in bytes. Default 1MiB.
	MaxBody int64
	// AckTimeout bounds how long ingest waits for Kafka before answering 503. Default 5s.
	AckTimeout time.Duration
	// DedupTTL is how long an event id is remembered. Default
	// DefaultDedupTTL, 168h.
	DedupTTL time.Duration
	// InstanceID names this process stably across restarts and container
	// re-creations: its transactional id, so a successor fences its
	// predecessor's open transaction at once. Default empty: host name
	// plus a hash of the data directory.
	InstanceID string
	// SecretKey (32 bytes) encrypts subscriber secrets at rest in the
	// subscriptions topic. Default none: they are stored as they are.
	SecretKey []byte
	// SecretKeyPrevious still decrypts secrets during a key rotation.
	// Default none.
	SecretKeyPrevious []byte
	// Delivery configures the dispatcher.
	Delivery Delivery
	// Log configures log/slog.
	Log Log
}

// DefaultDedupTTL is how long an event id is remembered by default, the
// default of HOOKSTREAM_DEDUP_TTL and of processor.Config.TTL.
const DefaultDedupTTL = 168 * time.Hour

// DefaultSchedule returns the default delays before retries 1..n, the
// default of HOOKSTREAM_DELIVERY_SCHEDULE and of dispatch.Config.Schedule.
func DefaultSchedule() []time.Duration {
	return []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
}

// Delivery configures outbound deliveries.
type Delivery struct {
	// Timeout of one HTTP attempt. Default 15s.
	Timeout time.Duration
	// Schedule holds the delays before retries 1..n. Default
	// DefaultSchedule, 5s,5m,30m,2h,5h,10h,10h.
	Schedule []time.Duration
	// AllowPrivate allows targets on loopback, private and link-local
	// addresses. Default false; true on the embedded broker.
	AllowPrivate bool
	// RequireHTTPS refuses subscriber URLs that are not https. Default
	// true; false on the embedded broker.
	RequireHTTPS bool
	// DisableAfter disables a subscription whose real attempts have all
	// failed for this long with no success. Default 0: the sum of Schedule.
	DisableAfter time.Duration
	// BreakerCooldown is how long an open circuit waits before its probe.
	// Default 30s, capped at the schedule's first delay.
	BreakerCooldown time.Duration
	// MaxSubscriptions is how many subscriptions may exist; creating one
	// more is refused. Default 1000.
	MaxSubscriptions int
	// ExprCPUShare is the share of one core that each subscription's
	// filter and transform may spend on a dispatcher over a minute; past
	// it the subscription is throttled. Default 0.25.
	ExprCPUShare float64
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string
	// Format is text or json. Default text.
	Format string
}

// Embedded reports whether the embedded broker is used.
func (c *Config) Embedded() bool { return len(c.Brokers) == 0 }

// SeedBrokers returns the brokers clients dial: the configured ones, or the
// embedded broker's address.
func (c *Config) SeedBrokers() []string {
	if c.Embedded() {
		return []string{c.EmbeddedAddr}
	}
	return c.Brokers
}

// Scope says which commands take a setting as a flag.
type Scope int

const (
	// Common settings are flags of every command that works on the
	// cluster: where it is and which deployment on it.
	Common Scope = iota
	// Topology settings shape the topics: flags of run and topics create.
	Topology
	// Server settings are flags of run only.
	Server
	// Admin settings are flags of run and of the commands that ask its
	// admin API (events get).
	Admin
)

// setting binds one variable and flag to a field of Config.
type setting struct {
	env, flag, def, usage string
	scope                 Scope
	set                   func(c *Config, v string) error
}

var settings = []setting{
	{"HOOKSTREAM_BROKERS", "brokers", "", "Kafka seed brokers, comma separated (empty: the embedded broker)", Common,
		func(c *Config, v string) error { c.Brokers = splitList(v); return nil }},
	{"HOOKSTREAM_EMBEDDED_ADDR", "embedded-addr", "127.0.0.1:9092", "listener of the embedded broker", Common,
		func(c *Config, v string) error { c.EmbeddedAddr = v; return hostPort(v) }},
	{"HOOKSTREAM_TOPIC_PREFIX", "topic-prefix", "hookstream", "prefix of every topic, group and transactional id", Common,
		func(c *Config, v string) error { c.TopicPrefix = v; return topicPrefix(v) }},
	{"HOOKSTREAM_PARTITIONS", "partitions", "12", "partitions of the ingest, events and changelog topics", Topology,
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > 10000 {
				return fmt.Errorf("invalid partition count %q (want 1 to 10000)", v)
			}
			c.Partitions = int32(n)
			return nil
		}},
	{"HOOKSTREAM_REPLICATION_FACTOR", "replication-factor", "", "replicas of every topic hookstream creates, min.insync.replicas one less (empty or 0: min(3, brokers in the cluster))", Topology,
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil || n < 0 {
				return fmt.Errorf("invalid replication factor %q (want 1 to 32767, or 0 for min(3, brokers))", v)
			}
			c.ReplicationFactor = int16(n)
			return nil
		}},
	{"HOOKSTREAM_LOG_LEVEL", "log-level", "info", "debug, info, warn or error", Common,
		func(c *Config, v string) error { c.Log.Level = v; return oneOf(v, "debug", "info", "warn", "error") }},
	{"HOOKSTREAM_LOG_FORMAT", "log-format", "text", "text or json", Server,
		func(c *Config, v string) error { c.Log.Format = v; return oneOf(v, "text", "json") }},
	{"HOOKSTREAM_DATA_DIR", "data-dir", "./data", "embedded broker log (kafka/) and state stores (state/); other commands find a running embedded broker there", Common,
		func(c *Config, v string) error { c.DataDir = v; return nonEmpty(v) }},
	{"HOOKSTREAM_CONFIG", "config", "", "YAML file with sources (empty: every source accepted unverified)", Server,
		func(c *Config, v string) error { c.SourcesFile = v; return nil }},
	{"HOOKSTREAM_HTTP_ADDR", "http-addr", "", "ingest listener (default: 127.0.0.1:8080 on the embedded broker, this host only; :8080 with HOOKSTREAM_BROKERS)", Server,
		func(c *Config, v string) error {
			c.HTTPAddr = v
			if v == "" {
				return nil
			}
			return hostPort(v)
		}},
	{"HOOKSTREAM_TRUSTED_PROXIES", "trusted-proxies", "", "networks (CIDR, comma separated) of the proxies in front of the ingest and admin listeners: their X-Forwarded-For names the client, their X-Forwarded-Proto and X-Forwarded-Host what the console's browser addressed (default none: the connection's address is the client)", Server,
		func(c *Config, v string) error {
			c.TrustedProxies = nil
			for _, part := range splitList(v) {
				p, err := netip.ParsePrefix(part)
				if err != nil {
					return fmt.Errorf("invalid network %q (want CIDR notation, e.g. 10.0.0.0/8)", part)
				}
				c.TrustedProxies = append(c.TrustedProxies, p.Masked())
			}
			return nil
		}},
	{"HOOKSTREAM_ADMIN_ADDR", "admin-addr", "127.0.0.1:8081", "admin API, /metrics, /healthz, /readyz", Admin,
		func(c *Config, v string) error { c.AdminAddr = v; return hostPort(v) }},
	{"HOOKSTREAM_ADMIN_ADVERTISED_ADDR", "admin-advertised-addr", "", "address other instances reach the admin listener at, to forward story queries (default: HOOKSTREAM_ADMIN_ADDR; a listener on every interface at the address the broker sees)", Server,
		func(c *Config, v string) error { c.AdminAdvertisedAddr = v; return advertised(v) }},
	{"HOOKSTREAM_ADMIN_TOKEN", "admin-token", "", "bearer token for /api/* (required when the admin address is not loopback)", Admin,
		func(c *Config, v string) error { c.AdminToken = v; return nil }},
	{"HOOKSTREAM_MAX_TOKENS", "max-tokens", "10000", "most access tokens that may exist; creating one more is refused (every instance holds each in memory)", Server,
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1_000_000 {
				return fmt.Errorf("invalid token limit %q (want 1 to 1000000)", v)
			}
			c.MaxTokens = n
			return nil
		}},
	{"HOOKSTREAM_AUDIT_RETENTION", "audit-retention", durations(topics.DefaultAuditRetention), "how long the audit trail (<prefix>.audit) keeps every change and refused request", Topology,
		func(c *Config, v string) (err error) { c.AuditRetention, err = positiveDuration(v); return err }},
	{"HOOKSTREAM_TRACE_URL", "trace-url", "", "link to an event's trace that events get and the console show, a URL containing {trace_id} (e.g. http://localhost:16686/trace/{trace_id})", Server,
		func(c *Config, v string) error { c.TraceURL = v; return tracing.CheckTraceURL(v) }},
	{"HOOKSTREAM_MAX_BODY", "max-body", "1MiB", "largest webhook body; larger ones get 413", Topology,
		func(c *Config, v string) error {
			n, err := humanize.ParseBytes(v)
			if err != nil || n < 1 || n > 64<<20 {
				return fmt.Errorf("invalid size %q (want 1B to 64MiB, e.g. 1MiB)", v)
			}
			c.MaxBody = int64(n)
			return nil
		}},
	{"HOOKSTREAM_ACK_TIMEOUT", "ack-timeout", "5s", "how long ingest waits for Kafka's acknowledgement before answering 503", Server,
		func(c *Config, v string) (err error) { c.AckTimeout, err = positiveDuration(v); return err }},
	{"HOOKSTREAM_DEDUP_TTL", "dedup-ttl", durations(DefaultDedupTTL), "how long an event id is remembered", Server,
		func(c *Config, v string) (err error) { c.DedupTTL, err = positiveDuration(v); return err }},
	{"HOOKSTREAM_DELIVERY_TIMEOUT", "delivery-timeout", "15s", "timeout of one delivery attempt", Server,
		func(c *Config, v string) (err error) { c.Delivery.Timeout, err = positiveDuration(v); return err }},
	{"HOOKSTREAM_DELIVERY_SCHEDULE", "delivery-schedule", durations(DefaultSchedule()...), "delays before retries 1..n", Server,
		func(c *Config, v string) (err error) { c.Delivery.Schedule, err = ParseSchedule(v); return err }},
	{"HOOKSTREAM_DELIVERY_DISABLE_AFTER", "delivery-disable-after", "", "disable a subscription whose attempts have all failed for this long (default: the sum of the schedule)", Server,
		func(c *Config, v string) (err error) {
			if v == "" {
				return nil
			}
			c.Delivery.DisableAfter, err = positiveDuration(v)
			return err
		}},
	{"HOOKSTREAM_DELIVERY_BREAKER_COOLDOWN", "delivery-breaker-cooldown", "30s", "how long an open circuit waits before its probe (never more than the schedule's first delay)", Server,
		func(c *Config, v string) (err error) {
			c.Delivery.BreakerCooldown, err = positiveDuration(v)
			return err
		}},
	{"HOOKSTREAM_INSTANCE_ID", "instance-id", "", "stable identity of this process, its transactional id (default: host name + data dir)", Server,
		func(c *Config, v string) error {
			c.InstanceID = v
			if v != "" && !topics.ValidName(v) {
				return fmt.Errorf("invalid instance id %q (want 1 to 100 letters, digits, '.', '_' or '-')", v)
			}
			return nil
		}},
	{"HOOKSTREAM_DELIVERY_REQUIRE_HTTPS", "delivery-require-https", "", "refuse subscriber URLs that are not https (default: true, false on the embedded broker)", Server,
		func(c *Config, v string) error { return brokerDependentBool(&c.Delivery.RequireHTTPS, v) }},
	{"HOOKSTREAM_SECRET_KEY", "secret-key", "", "base64 of 32 bytes that encrypts subscriber secrets at rest (prefer the variable to the flag)", Server,
		func(c *Config, v string) (err error) { c.SecretKey, err = secretKey(v); return err }},
	{"HOOKSTREAM_SECRET_KEY_PREVIOUS", "secret-key-previous", "", "the key before HOOKSTREAM_SECRET_KEY, still read during a rotation", Server,
		func(c *Config, v string) (err error) { c.SecretKeyPrevious, err = secretKey(v); return err }},
	{"HOOKSTREAM_DELIVERY_ALLOW_PRIVATE", "delivery-allow-private", "", "allow delivery to loopback/private/link-local addresses (default: true on the embedded broker only)", Server,
		func(c *Config, v string) error { return brokerDependentBool(&c.Delivery.AllowPrivate, v) }},
	{"HOOKSTREAM_MAX_SUBSCRIPTIONS", "max-subscriptions", "1000", "most subscriptions that may exist; creating one more is refused (each costs every dispatcher a Kafka client and consumer group)", Server,
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("invalid subscription limit %q (want a positive number)", v)
			}
			c.Delivery.MaxSubscriptions = n
			return nil
		}},
	{"HOOKSTREAM_EXPR_CPU_SHARE", "expr-cpu-share", "0.25", "share of a core each subscription's filter and transform may spend on a dispatcher over a minute; past it the subscription is throttled (its events wait, the others are not slowed)", Server,
		func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0 && f <= 64) {
				return fmt.Errorf("invalid share %q (want a number above 0, at most 64, e.g. 0.25)", v)
			}
			c.Delivery.ExprCPUShare = f
			return nil
		}},
}

// RegisterFlags adds the flags of the settings in scopes to fs.
func RegisterFlags(fs *pflag.FlagSet, scopes ...Scope) {
	for _, s := range settings {
		if slices.Contains(scopes, s.scope) {
			// An unset flag leaves the environment and the default in force,
			// so the flag's own default stays empty and usage names the real one.
			fs.String(s.flag, "", fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def))
		}
	}
}

// Load builds the configuration from defaults, the environment (lookup) and
// the flags of fs that were set, and validates it. The error lists every
// problem, one a line, each naming its variable; with it comes the
// configuration as far as it could be read, so that callers can add the
// problems of the files it names.
func Load(fs *pflag.FlagSet, lookup func(string) (string, bool)) (*Config, error) {
	c := &Config{}
	var errs []error
	privateSet, httpsSet := false, false
	for _, s := range settings {
		v, origin := s.def, s.env
		if ev, ok := lookup(s.env); ok {
			v = ev
		}
		if fs != nil {
			if f := fs.Lookup(s.flag); f != nil && f.Changed {
				v, origin = f.Value.String(), s.env+" (--"+s.flag+")"
			}
		}
		if s.env == "HOOKSTREAM_DELIVERY_ALLOW_PRIVATE" && v != "" {
			privateSet = true
		}
		if s.env == "HOOKSTREAM_DELIVERY_REQUIRE_HTTPS" && v != "" {
			httpsSet = true
		}
		if err := s.set(c, strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", origin, err))
		}
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = ":8080"
		if c.Embedded() { // a development setup: webhooks from this host only
			c.HTTPAddr = "127.0.0.1:8080"
		}
	}
	if !privateSet {
		c.Delivery.AllowPrivate = c.Embedded()
	}
	if !httpsSet {
		c.Delivery.RequireHTTPS = !c.Embedded()
	}
	if c.SecretKeyPrevious != nil && c.SecretKey == nil {
		errs = append(errs, errors.New("HOOKSTREAM_SECRET_KEY_PREVIOUS: set without HOOKSTREAM_SECRET_KEY (during a rotation both are set)"))
	}
	if len(c.Delivery.Schedule) > 0 {
		c.Delivery.BreakerCooldown = min(c.Delivery.BreakerCooldown, c.Delivery.Schedule[0])
	}
	if c.AdminToken == "" && c.AdminAddr != "" && !loopback(c.AdminAddr) {
		errs = append(errs, errors.New("HOOKSTREAM_ADMIN_TOKEN: required because HOOKSTREAM_ADMIN_ADDR "+c.AdminAddr+" is not a loopback address"))
	}
	return c, errors.Join(errs...)
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func hostPort(v string) error {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		return fmt.Errorf("invalid address %q (want host:port)", v)
	}
	return nil
}

// advertised checks an address other hosts dial: empty (none), or
// host:port with a host.
func advertised(v string) error {
	if v == "" {
		return nil
	}
	if err := hostPort(v); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(v)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q names no host (want the host name or address other instances reach)", v)
	}
	return nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func topicPrefix(v string) error {
	if !topics.ValidName(v) {
		return fmt.Errorf("invalid prefix %q (want 1 to 100 letters, digits, '.', '_' or '-')", v)
	}
	return nil
}

func oneOf(v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("invalid value %q (want %s)", v, strings.Join(allowed, ", "))
}

func nonEmpty(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// brokerDependentBool sets dst from v; empty leaves it to Load, which
// decides once it knows whether the embedded broker is used.
func brokerDependentBool(dst *bool, v string) error {
	if v == "" {
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("invalid boolean %q", v)
	}
	*dst = b
	return nil
}

// secretKey decodes a key of 32 bytes in standard base64; empty is none.
// Errors never repeat the value.
func secretKey(v string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	k, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(k) != 32 {
		return nil, errors.New("not base64 of 32 bytes (generate one with: openssl rand -base64 32)")
	}
	return k, nil
}

// durations writes ds as a setting's default: comma separated, without
// zero minutes or seconds (168h, 5s,5m,2h).
func durations(ds ...time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// ParseSchedule reads a retry schedule: the delays before retries 1..n,
// comma-separated, each positive. It reads HOOKSTREAM_DELIVERY_SCHEDULE
// and a subscription's own schedule alike; "" is no delay at all.
func ParseSchedule(v string) ([]time.Duration, error) {
	var schedule []time.Duration
	for _, part := range splitList(v) {
		d, err := positiveDuration(part)
		if err != nil {
			return nil, err
		}
		schedule = append(schedule, d)
	}
	return schedule, nil
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 5s, 10m, 168h)", v)
	}
	return d, nil
}
