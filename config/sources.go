package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookstream/hookstream/signature"
)

// Sources is the content of the HOOKSTREAM_CONFIG file: how each provider's
// webhooks are verified and identified.
type Sources struct {
	// AllowUnknown accepts POSTs to sources the file does not name, unverified.
	// Default false with a file; with no file at all every source is accepted.
	AllowUnknown bool `yaml:"allow_unknown_sources"`
	// Sources by name, as used in POST /webhooks/{source}.
	Sources map[string]Source `yaml:"sources"`
}

// Source configures one provider.
type Source struct {
	// Verify says how a request proves it comes from the provider. Default: none.
	Verify Verify `yaml:"verify"`
	// EventID says where the event id is: header:NAME, json:path, template:...,
	// preset:gitlab. Default: the chain of well-known headers and JSON fields.
	EventID string `yaml:"event_id"`
	// EventType takes the same forms as EventID. Default: JSON type, else the
	// source name.
	EventType string `yaml:"event_type"`
	// RateLimit is "N/s", "N/m" or "N/h". Default: unlimited.
	RateLimit string `yaml:"rate_limit"`
	// Headers are extra provider headers carried on the Kafka record as
	// hs-h-<name>, besides the signature and event headers.
	Headers []string `yaml:"headers"`
}

// Verify configures signature verification of one source.
type Verify struct {
	// Scheme is github, gitlab-style token, stripe, shopify, slack, standard,
	// hmac or none.
	Scheme string `yaml:"scheme"`
	// Secret is the shared secret. Required for every scheme but none.
	Secret string `yaml:"secret"`
	// OldSecrets are still accepted while a provider rotates to Secret.
	OldSecrets []string `yaml:"old_secrets"`
	// Header carries the token (token) or the signature (hmac).
	Header string `yaml:"header"`
	// Algorithm of the hmac scheme: sha256 (default), sha1 or sha512.
	Algorithm string `yaml:"algorithm"`
	// Encoding of the hmac scheme's signature: hex (default) or base64.
	Encoding string `yaml:"encoding"`
	// Prefix before the hmac scheme's signature, such as "sha256=".
	Prefix string `yaml:"prefix"`
	// Tolerance of timestamped schemes (stripe, slack, standard). Default 5m.
	Tolerance time.Duration `yaml:"tolerance"`
}

// Schemes lists the verify schemes hookstream knows.
var Schemes = []string{"github", "stripe", "shopify", "slack", "standard", "token", "hmac", "none"}

// DefaultTolerance is the timestamp tolerance of timestamped schemes.
const DefaultTolerance = 5 * time.Minute

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadSources reads and validates a sources file. ${VAR} references expand
// from lookup; a missing variable is an error.
func LoadSources(path string, lookup func(string) (string, bool)) (Sources, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	return ParseSources(raw, lookup)
}

// ParseSources parses a sources document. Errors name the key at fault.
func ParseSources(raw []byte, lookup func(string) (string, bool)) (Sources, error) {
	var missing []string
	expanded := envRef.ReplaceAllFunc(raw, func(m []byte) []byte {
		name := string(envRef.FindSubmatch(m)[1])
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
		}
		return []byte(v)
	})
	if len(missing) > 0 {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: environment variable %s is not set", strings.Join(missing, ", "))
	}
	var s Sources
	dec := yaml.NewDecoder(strings.NewReader(string(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	return s, s.Validate()
}

// Validate reports every problem of the sources at once.
func (s Sources) Validate() error {
	var errs []error
	names := make([]string, 0, len(s.Sources))
	for name := range s.Sources {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		src := s.Sources[name]
		at := "sources." + name
		if !ValidName(name) {
			errs = append(errs, fmt.Errorf("%s: source names use letters, digits, '-', '_' and '.' only", at))
		}
		v := src.Verify
		switch v.Scheme {
		case "", "none":
		case "github", "stripe", "shopify", "slack", "standard", "token", "hmac":
			if v.Secret == "" {
				errs = append(errs, fmt.Errorf("%s.verify.secret: required by scheme %s", at, v.Scheme))
			}
		default:
			errs = append(errs, fmt.Errorf("%s.verify.scheme: unknown scheme %q (want one of %s)", at, v.Scheme, strings.Join(Schemes, ", ")))
		}
		if v.Scheme == "standard" {
			for i, secret := range append([]string{v.Secret}, v.OldSecrets...) {
				if _, err := signature.DecodeSecret(secret); secret != "" && err != nil {
					key := at + ".verify.secret"
					if i > 0 {
						key = fmt.Sprintf("%s.verify.old_secrets[%d]", at, i-1)
					}
					errs = append(errs, fmt.Errorf("%s: %w", key, err))
				}
			}
		}
		if (v.Scheme == "token" || v.Scheme == "hmac") && v.Header == "" {
			errs = append(errs, fmt.Errorf("%s.verify.header: required by scheme %s", at, v.Scheme))
		}
		if v.Tolerance < 0 {
			errs = append(errs, fmt.Errorf("%s.verify.tolerance: must not be negative", at))
		}
		if src.RateLimit != "" {
			if _, _, err := ParseRate(src.RateLimit); err != nil {
				errs = append(errs, fmt.Errorf("%s.rate_limit: %w", at, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("HOOKSTREAM_CONFIG: %w", errors.Join(errs...))
	}
	return nil
}

// ValidName reports whether name may be used as a source or topic prefix:
// 1 to 100 letters, digits, '.', '_' or '-', as Kafka topic names allow.
func ValidName(name string) bool {
	if name == "" || len(name) > 100 {
		return false
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}

// ParseRate parses "N/s", "N/m" or "N/h" into events per second and a burst.
func ParseRate(s string) (perSecond float64, burst int, err error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("invalid rate %q (want N/s, N/m or N/h)", s)
	}
	count, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || count <= 0 {
		return 0, 0, fmt.Errorf("invalid rate %q (want a positive N in N/s)", s)
	}
	var per time.Duration
	switch strings.TrimSpace(unit) {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		return 0, 0, fmt.Errorf("invalid rate %q (want N/s, N/m or N/h)", s)
	}
	perSecond = count / per.Seconds()
	return perSecond, max(1, int(count)), nil
}
