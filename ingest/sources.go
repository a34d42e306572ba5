package ingest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
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
	// Validate checks payloads against JSON Schemas. Default: unvalidated.
	Validate Validation `yaml:"validate"`
}

// Verify configures signature verification of one source.
type Verify struct {
	// Scheme is one of Schemes. Default: none.
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

// The verify schemes.
const (
	SchemeGitHub   = "github"   // X-Hub-Signature-256: sha256=hex HMAC of the body
	SchemeStripe   = "stripe"   // Stripe-Signature: t=,v1= over t.body
	SchemeShopify  = "shopify"  // X-Shopify-Hmac-Sha256: base64 HMAC of the body
	SchemeSlack    = "slack"    // X-Slack-Signature: v0= over v0:ts:body
	SchemeStandard = "standard" // Standard Webhooks, package signature
	SchemeToken    = "token"    // a constant header value
	SchemeHMAC     = "hmac"     // generic: header, algorithm, encoding, prefix
	SchemeNone     = "none"     // unverified
)

// Schemes lists the verify schemes hookstream knows.
var Schemes = []string{SchemeGitHub, SchemeStripe, SchemeShopify, SchemeSlack, SchemeStandard, SchemeToken, SchemeHMAC, SchemeNone}

// DefaultTolerance is the timestamp tolerance of timestamped schemes.
const DefaultTolerance = 5 * time.Minute

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadSources reads and validates a sources file and compiles the JSON
// Schemas it names (relative paths against the file's directory). ${VAR}
// references expand from lookup; a missing variable is an error.
func LoadSources(path string, lookup func(string) (string, bool)) (Sources, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	s, err := ParseSources(raw, lookup)
	if err != nil {
		return Sources{}, err
	}
	return s, s.loadSchemas(filepath.Dir(path))
}

// loadSchemas compiles the schemas of every source; the error names each
// source, glob and file at fault.
func (s Sources) loadSchemas(dir string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.Sources)) {
		src := s.Sources[name]
		for _, err := range src.Validate.load(dir) {
			errs = append(errs, fmt.Errorf("sources.%s.%w", name, err))
		}
		s.Sources[name] = src
	}
	if len(errs) > 0 {
		return fmt.Errorf("HOOKSTREAM_CONFIG: %w", errors.Join(errs...))
	}
	return nil
}

// ParseSources parses a sources document and validates it. ${VAR}
// references expand from lookup in keys and values, not in comments, each
// into the scalar it is written in: a variable's value never adds
// structure. Errors name the key at fault.
func ParseSources(raw []byte, lookup func(string) (string, bool)) (Sources, error) {
	// Each reference is first written as a plain word that YAML takes
	// anywhere ${...} could stand (a flow mapping's braces included),
	// then expanded in the scalars it ends up in.
	ref, err := newEnvPlaceholder()
	if err != nil {
		return Sources{}, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(envRef.ReplaceAll(raw, []byte(ref.mark+"${1}"+ref.mark)), &doc); err != nil {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	if missing := ref.expand(&doc, lookup); len(missing) > 0 {
		slices.Sort(missing)
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: environment variable %s is not set", strings.Join(slices.Compact(missing), ", "))
	}
	var s Sources
	if doc.Kind == 0 { // an empty document
		return s, s.Validate()
	}
	expanded, err := yaml.Marshal(&doc)
	if err != nil {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return Sources{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	return s, s.Validate()
}

// envPlaceholder writes ${NAME} as mark+NAME+mark, mark a random word no
// document holds by chance.
type envPlaceholder struct {
	mark string
	re   *regexp.Regexp
}

func newEnvPlaceholder() (envPlaceholder, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return envPlaceholder{}, fmt.Errorf("HOOKSTREAM_CONFIG: %w", err)
	}
	mark := "hsenv" + hex.EncodeToString(b)
	return envPlaceholder{mark: mark, re: regexp.MustCompile(mark + `([A-Za-z_][A-Za-z0-9_]*?)` + mark)}, nil
}

// expand replaces the placeholders of n's scalars with their variables'
// values from lookup, and returns the variables not set.
func (p envPlaceholder) expand(n *yaml.Node, lookup func(string) (string, bool)) (missing []string) {
	for _, c := range n.Content {
		missing = append(missing, p.expand(c, lookup)...)
	}
	if n.Kind != yaml.ScalarNode || !p.re.MatchString(n.Value) {
		return missing
	}
	n.Value = p.re.ReplaceAllStringFunc(n.Value, func(m string) string {
		name := p.re.FindStringSubmatch(m)[1]
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	n.Tag = "" // resolved again from the value, as if written there
	return missing
}

// Validate reports every problem of the sources at once, one a line, each
// naming its key.
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
		if !topics.ValidName(name) {
			errs = append(errs, fmt.Errorf("%s: source names use letters, digits, '-', '_' and '.' only", at))
		}
		if name == topics.OperationalSource {
			errs = append(errs, fmt.Errorf("%s: reserved for hookstream's operational events", at))
		}
		for _, err := range src.Verify.problems() {
			errs = append(errs, fmt.Errorf("%s.%w", at, err))
		}
		if _, err := ParseField(src.EventID); err != nil {
			errs = append(errs, fmt.Errorf("%s.event_id: %w", at, err))
		}
		if _, err := ParseField(src.EventType); err != nil {
			errs = append(errs, fmt.Errorf("%s.event_type: %w", at, err))
		}
		for _, err := range src.Validate.problems() {
			errs = append(errs, fmt.Errorf("%s.%w", at, err))
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

// problems reports every problem of v, each naming its field. Fields the
// scheme does not read are refused, so that a mistake does not pass
// silently.
func (v Verify) problems() []error {
	scheme := v.Scheme
	if scheme == "" {
		scheme = SchemeNone
	}
	if !slices.Contains(Schemes, scheme) {
		return []error{fmt.Errorf("verify.scheme: unknown scheme %q (want one of %s)", v.Scheme, strings.Join(Schemes, ", "))}
	}
	var (
		keyed   = scheme != SchemeNone
		header  = scheme == SchemeToken || scheme == SchemeHMAC
		timed   = scheme == SchemeStripe || scheme == SchemeSlack || scheme == SchemeStandard
		generic = scheme == SchemeHMAC
		errs    []error
	)
	unused := func(field string) {
		if scheme == SchemeNone {
			errs = append(errs, fmt.Errorf("verify.%s: not used by scheme none (set verify.scheme)", field))
			return
		}
		errs = append(errs, fmt.Errorf("verify.%s: not used by scheme %s", field, scheme))
	}
	switch {
	case keyed && v.Secret == "":
		errs = append(errs, fmt.Errorf("verify.secret: required by scheme %s", scheme))
	case !keyed && v.Secret != "":
		unused("secret")
	}
	if !keyed && len(v.OldSecrets) > 0 {
		unused("old_secrets")
	}
	switch {
	case header && v.Header == "":
		errs = append(errs, fmt.Errorf("verify.header: required by scheme %s", scheme))
	case !header && v.Header != "":
		unused("header")
	case header && !validHeaderName(v.Header):
		errs = append(errs, fmt.Errorf("verify.header: %q is not a valid header name", v.Header))
	}
	if _, ok := verifyAlgorithms[v.Algorithm]; !generic && v.Algorithm != "" {
		unused("algorithm")
	} else if !ok {
		errs = append(errs, fmt.Errorf("verify.algorithm: unknown algorithm %q (want sha256, sha1 or sha512)", v.Algorithm))
	}
	if _, ok := verifyEncodings[v.Encoding]; !generic && v.Encoding != "" {
		unused("encoding")
	} else if !ok {
		errs = append(errs, fmt.Errorf("verify.encoding: unknown encoding %q (want hex or base64)", v.Encoding))
	}
	if !generic && v.Prefix != "" {
		unused("prefix")
	}
	switch {
	case v.Tolerance < 0:
		errs = append(errs, errors.New("verify.tolerance: must not be negative"))
	case !timed && v.Tolerance != 0:
		unused("tolerance")
	}
	if !keyed {
		return errs
	}
	for i, s := range append([]string{v.Secret}, v.OldSecrets...) {
		switch {
		case i == 0 && s == "":
			// Reported as required.
		case s == "":
			errs = append(errs, fmt.Errorf("%s: empty", secretField(i)))
		case strings.TrimSpace(s) != s:
			// Providers never put white space around a secret, and HTTP trims
			// it from header values: it is a copying mistake.
			errs = append(errs, fmt.Errorf("%s: has leading or trailing white space", secretField(i)))
		case scheme == SchemeStandard:
			if _, err := signature.DecodeSecret(s); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", secretField(i), err))
			}
		}
	}
	return errs
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHeaderNameChar(s[i]) {
			return false
		}
	}
	return true
}

// secretField names the i-th secret of a source: Secret, then OldSecrets.
func secretField(i int) string {
	if i == 0 {
		return "verify.secret"
	}
	return fmt.Sprintf("verify.old_secrets[%d]", i-1)
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
