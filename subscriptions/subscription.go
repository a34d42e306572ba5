// Package subscriptions owns who receives what: the Subscription record
// (URL, secrets, filters, ordering, bounds, batching) and its validation,
// the rules a subscriber URL must meet when it is written, and the
// Registry, the one read-modify-write of the compacted subscriptions
// topic: every write (CLI, admin API, dispatchers) is a Kafka transaction
// under one shared transactional id, a change of Enabled writes its
// operational event in the same transaction, a Watch keeps a daemon's
// snapshot current, and secrets are encrypted at rest (SecretKeys).
//
// It refuses to own delivery: consumer groups on the events topic,
// signing and sending requests, retries, circuits, batching and the
// delivery DLQ are package dispatch's, which imports this one (never the
// reverse). Whether a URL's host is a public address is checked at each
// delivery by dispatch's dialer, not here. Its endpoints on the admin
// listener (API, api.go) are its own; the admin listener's guard is
// admin's, and the CLI's commands that call the Registry are cmd's.
package subscriptions

import (
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

// Subscription is a subscriber and what it receives. Its Kind is set by
// which of URL, Topic and Pull it has: exactly one.
type Subscription struct {
	ID string `json:"id"`
	// URL is a webhook subscription's endpoint.
	URL string `json:"url,omitempty"`
	// Topic is a topic subscription's Kafka topic: matching events are
	// written to it exactly once.
	Topic string `json:"topic,omitempty"`
	// Pull subscriptions are read by their consumers over HTTP.
	Pull bool `json:"pull,omitempty"`
	// Secret signs a webhook subscription's deliveries; a pull
	// subscription's is its pull token; a topic subscription has none.
	Secret      string `json:"secret,omitempty"`
	Description string `json:"description,omitempty"`
	// Team is the team whose team tokens manage the subscription; empty:
	// admins and operators only.
	Team string `json:"team,omitempty"`
	// Sources and EventTypes filter events by glob; empty means all.
	Sources    []string `json:"sources,omitempty"`
	EventTypes []string `json:"event_types,omitempty"`
	Enabled    bool     `json:"enabled"`
	// DisabledReason says why hookstream disabled the subscription.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// Ordered subscriptions deliver one event at a time per partition and
	// retry in place, keeping each partition's order.
	Ordered bool `json:"ordered"`
	// MaxInFlight bounds concurrent deliveries of unordered subscriptions.
	MaxInFlight int `json:"max_in_flight"`
	// RateLimit bounds deliveries per second; 0 is unlimited.
	RateLimit float64 `json:"rate_limit,omitempty"`
	// BatchMax is how many events of one partition a delivery carries at
	// most, 1 to 1000; default 1: one envelope per delivery, no batch body.
	BatchMax int `json:"batch_max"`
	// BatchWait is how long a partial batch waits for more events before
	// it is sent, at most MaxBatchWait; default 0: a batch takes the events
	// already read and goes at once.
	BatchWait Duration `json:"batch_wait,omitempty"`
	// Filter is a CEL expression (package expr) an event must make true to
	// be delivered, tried after Sources and EventTypes; empty: every event
	// they let through.
	Filter string `json:"filter,omitempty"`
	// Transform is a CEL expression whose value, as JSON, is the body
	// delivered instead of the envelope; empty: the envelope.
	Transform string `json:"transform,omitempty"`
	// Headers are added to every delivery: at most MaxHeaders, names
	// canonical (http.CanonicalHeaderKey), values encrypted at rest like
	// the secret. None of hookstream's own (ReservedHeader).
	Headers map[string]string `json:"headers,omitempty"`
	// Schedule holds this subscription's delays before retries 1..n, at
	// most MaxScheduleRetries of at most MaxScheduleDelay each; empty:
	// HOOKSTREAM_DELIVERY_SCHEDULE.
	Schedule []Duration `json:"schedule,omitempty"`
	// Timeout of one delivery attempt, at most MaxTimeout; 0:
	// HOOKSTREAM_DELIVERY_TIMEOUT.
	Timeout Duration `json:"timeout,omitempty"`
	// PreviousSecret keeps signing beside Secret until PreviousSecretUntil,
	// so subscribers can roll their verification over.
	PreviousSecret      string    `json:"previous_secret,omitempty"`
	PreviousSecretUntil time.Time `json:"previous_secret_until,omitzero"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	// Rewind is the last replay of the subscription asked of running
	// dispatchers (replay --group sub:<id> --execute while they run):
	// each dispatcher moves the cursor of the partitions it owns to
	// Offsets once, and tags every commit of the cursor after with
	// Rewind.Tag(), which is how the replay knows it was applied.
	Rewind *Rewind `json:"rewind,omitempty"`
}

// Rewind is a replay of a subscription handed to running dispatchers.
type Rewind struct {
	ID string `json:"id"`
	// Offsets are the targets on the events topic, by partition.
	Offsets map[int32]int64 `json:"offsets"`
}

// Tag is the commit metadata of a cursor once the rewind is applied.
func (r *Rewind) Tag() string {
	if r == nil {
		return ""
	}
	return "rewind:" + r.ID
}

// Kinds of subscription, as Kind names them.
const (
	KindWebhook = "webhook"
	KindTopic   = "topic"
	KindPull    = "pull"
)

// Kind is the subscription's kind: KindTopic with a Topic, KindPull when
// Pull, else KindWebhook.
func (s *Subscription) Kind() string {
	switch {
	case s.Topic != "":
		return KindTopic
	case s.Pull:
		return KindPull
	default:
		return KindWebhook
	}
}

// DefaultMaxInFlight bounds a subscription's concurrent deliveries.
const DefaultMaxInFlight = 16

// Batching bounds.
const (
	MaxBatchMax  = 1000
	MaxBatchWait = 10 * time.Second
)

// Bounds of a subscription's own headers, schedule and timeout.
const (
	MaxHeaders          = 20
	MaxHeaderNameBytes  = 256
	MaxHeaderValueBytes = 4 << 10
	// MaxHeadersBytes bounds the names and values of all headers together.
	MaxHeadersBytes    = 16 << 10
	MaxScheduleRetries = 20
	// MaxScheduleDelay bounds each delay: a retry waits in the retry
	// topic (14 days' retention) for at most one delay.
	MaxScheduleDelay = 24 * time.Hour
	MaxTimeout       = 60 * time.Second
)

// RotationOverlap is how long a rotated-out secret keeps signing.
const RotationOverlap = 24 * time.Hour

// NewID returns a subscription id: "sub_" and 16 lowercase base32 characters.
func NewID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	for i := range b {
		b[i] = alphabet[b[i]%32]
	}
	return "sub_" + string(b[:])
}

// Validate reports every problem of s at once, one line each.
func (s *Subscription) Validate() error { return s.validate(true) }

// validate is Validate, its filter and transform compiled only when exprs.
func (s *Subscription) validate(exprs bool) error {
	var errs []error
	if !validID(s.ID) {
		errs = append(errs, fmt.Errorf("id: %q is not a valid id", s.ID))
	}
	errs = append(errs, s.validateKind()...)
	if s.Team != "" && !admin.ValidName(s.Team) {
		errs = append(errs, fmt.Errorf("team: %.70q is not 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit", s.Team))
	}
	for _, g := range s.Sources {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			errs = append(errs, fmt.Errorf("sources: invalid glob %q", g))
		}
	}
	for _, g := range s.EventTypes {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			errs = append(errs, fmt.Errorf("event_types: invalid glob %q", g))
		}
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > 1000 {
		errs = append(errs, fmt.Errorf("max_in_flight: %d is not between 1 and 1000", s.MaxInFlight))
	}
	if s.RateLimit < 0 {
		errs = append(errs, fmt.Errorf("rate_limit: %v must not be negative", s.RateLimit))
	}
	errs = append(errs, validateBatching(s.BatchMax, s.BatchWait)...)
	if exprs {
		errs = append(errs, s.validateExpressions()...)
	}
	errs = append(errs, validateHeaders(s.Headers)...)
	errs = append(errs, validateSchedule(s.Schedule)...)
	errs = append(errs, validateTimeout(s.Timeout)...)
	return invalid(errs)
}

// validID reports whether id may be a subscription's: 1 to 100 bytes,
// no space, tab, newline, slash or colon.
func validID(id string) bool {
	return id != "" && len(id) <= 100 && !strings.ContainsAny(id, " /:\t\n")
}

// validateKind checks that s is one kind and has what that kind needs.
func (s *Subscription) validateKind() []error {
	kinds := 0
	for _, set := range []bool{s.URL != "", s.Topic != "", s.Pull} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return []error{errors.New("kind: a subscription has exactly one of url, topic and pull")}
	}
	var errs []error
	switch s.Kind() {
	case KindWebhook:
		if err := ValidateURL(s.URL); err != nil {
			errs = append(errs, err)
		}
		if _, err := signature.DecodeSecret(s.Secret); err != nil {
			errs = append(errs, fmt.Errorf("secret: %w", err))
		}
	case KindTopic:
		if err := ValidateTopic(s.Topic); err != nil {
			errs = append(errs, err)
		}
		if s.Secret != "" {
			errs = append(errs, errors.New("secret: a topic subscription has none"))
		}
	case KindPull:
		if _, err := signature.DecodeSecret(s.Secret); err != nil {
			errs = append(errs, fmt.Errorf("secret (pull token): %w", err))
		}
	}
	return errs
}

// ValidateTopic checks a topic subscription's topic name as Kafka does:
// 1 to 249 characters of [a-zA-Z0-9._-], not "." or "..".
func ValidateTopic(name string) error {
	ok := name != "" && len(name) <= 249 && name != "." && name != ".."
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("topic: %.64q is not a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)", name)
	}
	return nil
}

func validateTimeout(timeout Duration) []error {
	if timeout < 0 || time.Duration(timeout) > MaxTimeout {
		return []error{fmt.Errorf("timeout: %v is not between 0s (HOOKSTREAM_DELIVERY_TIMEOUT) and 60s", timeout)}
	}
	return nil
}

// validateExpressions compiles the filter and the transform.
func (s *Subscription) validateExpressions() []error {
	var errs []error
	if s.Filter != "" {
		if _, err := expr.CompileFilter(s.Filter); err != nil {
			errs = append(errs, fmt.Errorf("invalid filter: %w", err))
		}
	}
	if s.Transform != "" {
		if _, err := expr.CompileTransform(s.Transform); err != nil {
			errs = append(errs, fmt.Errorf("invalid transform: %w", err))
		}
	}
	return errs
}

// reservedHeaders are the headers hookstream sets on a delivery, or
// that belong to the connection: a subscription may not set them.
var reservedHeaders = []string{
	"content-type", "content-length", "host", "user-agent", "traceparent", "tracestate",
	"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
}

// ReservedHeader reports whether a subscription may not set header name
// (any case): webhook-* (Standard Webhooks), Content-Type,
// Content-Length, Host, User-Agent, the trace context (traceparent,
// tracestate) and the connection's own (Connection, Transfer-Encoding,
// ...).
func ReservedHeader(name string) bool {
	name = strings.ToLower(name)
	return strings.HasPrefix(name, "webhook-") || slices.Contains(reservedHeaders, name)
}

// validateHeaders reports every problem of a subscription's headers.
func validateHeaders(headers map[string]string) []error {
	var errs []error
	if len(headers) > MaxHeaders {
		errs = append(errs, fmt.Errorf("headers: %d headers, at most %d", len(headers), MaxHeaders))
	}
	total := 0
	seen := make(map[string]string, len(headers))
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		value := headers[name]
		total += len(name) + len(value)
		switch {
		case len(name) > MaxHeaderNameBytes:
			errs = append(errs, fmt.Errorf("headers: name %.32q... is longer than %d bytes", name, MaxHeaderNameBytes))
			continue
		case !httpguts.ValidHeaderFieldName(name):
			errs = append(errs, fmt.Errorf("headers: %q is not a valid header name", name))
			continue
		case ReservedHeader(name):
			errs = append(errs, fmt.Errorf("headers: %s is set by hookstream and cannot be set by a subscription", name))
			continue
		}
		canonical := http.CanonicalHeaderKey(name)
		if other, ok := seen[canonical]; ok {
			errs = append(errs, fmt.Errorf("headers: %s and %s are the same header", other, name))
		}
		seen[canonical] = name
		switch {
		case value == "":
			errs = append(errs, fmt.Errorf("headers: %s has an empty value", name))
		case len(value) > MaxHeaderValueBytes:
			errs = append(errs, fmt.Errorf("headers: %s: value of %d bytes, at most %d", name, len(value), MaxHeaderValueBytes))
		case !httpguts.ValidHeaderFieldValue(value):
			errs = append(errs, fmt.Errorf("headers: %s: value holds a control character (a line break?)", name))
		}
	}
	if total > MaxHeadersBytes {
		errs = append(errs, fmt.Errorf("headers: %d bytes of names and values, at most %d", total, MaxHeadersBytes))
	}
	return errs
}

// canonicalHeaders returns headers with canonical names (validated: no
// two of them the same header).
func canonicalHeaders(headers map[string]string) map[string]string {
	if len(headers) == 0 {
		return nil
	}
	out := make(map[string]string, len(headers))
	for name, value := range headers {
		out[http.CanonicalHeaderKey(name)] = value
	}
	return out
}

// validateSchedule reports every problem of a subscription's schedule;
// its delays are read as config.ParseSchedule reads them.
func validateSchedule(schedule []Duration) []error {
	var errs []error
	if len(schedule) > MaxScheduleRetries {
		errs = append(errs, fmt.Errorf("schedule: %d delays, at most %d", len(schedule), MaxScheduleRetries))
	}
	for i, d := range schedule {
		if d <= 0 || time.Duration(d) > MaxScheduleDelay {
			errs = append(errs, fmt.Errorf("schedule: delay %d (%v) is not above 0s and at most 24h", i+1, d))
		}
	}
	return errs
}

func invalid(errs []error) error {
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

func validateBatching(batchMax int, wait Duration) []error {
	var errs []error
	if batchMax < 1 || batchMax > MaxBatchMax {
		errs = append(errs, fmt.Errorf("batch_max: %d is not between 1 and %d", batchMax, MaxBatchMax))
	}
	if wait < 0 || time.Duration(wait) > MaxBatchWait {
		errs = append(errs, fmt.Errorf("batch_wait: %v is not between 0s and %v", wait, MaxBatchWait))
	}
	return errs
}

// Duration is a time.Duration written as people write one: "500ms",
// "30s", "5m", "1h30m" (not Go's "5m0s"), in JSON, the CLI and the
// console.
type Duration time.Duration

func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 500ms or 2s", b)
	}
	*d = Duration(v)
	return nil
}

// ErrInvalid marks a subscription, or a start position, that fails
// validation: the admin API answers it 400 (admin.Error).
var ErrInvalid = admin.Invalid("invalid subscription")

// Matches reports whether an event of source and type passes the filters.
// Operational events (source hookstream) pass only a subscription that
// names their source exactly: no filter, or a glob, does not ask for them.
func (s *Subscription) Matches(source, eventType string) bool {
	if source == topics.OperationalSource {
		return slices.Contains(s.Sources, source) && matchAny(s.EventTypes, eventType)
	}
	return matchAny(s.Sources, source) && matchAny(s.EventTypes, eventType)
}

func matchAny(globs []string, v string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, v); ok {
			return true
		}
	}
	return false
}

// Keys are the signing keys in force at now: the secret, then the previous
// one during its overlap. Invalid secrets are skipped (Validate refuses them).
func (s *Subscription) Keys(now time.Time) [][]byte {
	keys := make([][]byte, 0, 2)
	if k, err := signature.DecodeSecret(s.Secret); err == nil {
		keys = append(keys, k)
	}
	if s.PreviousSecret != "" && now.Before(s.PreviousSecretUntil) {
		if k, err := signature.DecodeSecret(s.PreviousSecret); err == nil {
			keys = append(keys, k)
		}
	}
	return keys
}

// Rotate replaces the secret (a new one when secret is empty), keeping the
// old one signing for RotationOverlap.
func (s *Subscription) Rotate(secret string, now time.Time) {
	if secret == "" {
		secret = signature.NewSecret()
	}
	s.PreviousSecret, s.PreviousSecretUntil = s.Secret, now.Add(RotationOverlap)
	s.Secret = secret
	s.UpdatedAt = now
}

// Redacted is s without secrets nor header values, for logs and
// listings.
func (s Subscription) Redacted() Subscription {
	if s.Secret != "" {
		s.Secret = "whsec_…"
	}
	if s.PreviousSecret != "" {
		s.PreviousSecret = "whsec_…"
	}
	if s.Headers != nil {
		hidden := make(map[string]string, len(s.Headers))
		for name := range s.Headers {
			hidden[name] = "…"
		}
		s.Headers = hidden
	}
	return s
}

// Patch is a partial change of a subscription, as the CLI and the admin
// API take it: nil fields stay as they are.
type Patch struct {
	URL         *string   `json:"url"`
	Topic       *string   `json:"topic"`
	Secret      *string   `json:"secret"`
	Description *string   `json:"description"`
	Team        *string   `json:"team"`
	Sources     *[]string `json:"sources"`
	EventTypes  *[]string `json:"event_types"`
	Enabled     *bool     `json:"enabled"`
	Ordered     *bool     `json:"ordered"`
	MaxInFlight *int      `json:"max_in_flight"`
	RateLimit   *float64  `json:"rate_limit"`
	BatchMax    *int      `json:"batch_max"`
	BatchWait   *Duration `json:"batch_wait"`
	Filter      *string   `json:"filter"`
	Transform   *string   `json:"transform"`
	// Headers replaces every header of the subscription; {} removes them.
	Headers  *map[string]string `json:"headers"`
	Schedule *[]Duration        `json:"schedule"`
	Timeout  *Duration          `json:"timeout"`
}

// Validate refuses the values a patch may not set even where a new
// subscription takes the zero value for the default: batch_max 0, say;
// and the controls it sets that no subscription may have (a filter that
// does not compile, a reserved header), before any subscription is read.
// Every other check is the subscription's Validate, once applied.
func (p Patch) Validate() error {
	var errs []error
	if p.BatchMax != nil || p.BatchWait != nil {
		batchMax, wait := 1, Duration(0)
		set(&batchMax, p.BatchMax)
		set(&wait, p.BatchWait)
		errs = append(errs, validateBatching(batchMax, wait)...)
	}
	var s Subscription
	p.Apply(&s)
	errs = append(errs, s.validateExpressions()...)
	errs = append(errs, validateHeaders(s.Headers)...)
	errs = append(errs, validateSchedule(s.Schedule)...)
	errs = append(errs, validateTimeout(s.Timeout)...)
	return invalid(errs)
}

// Apply changes s. Enabling a subscription clears the reason hookstream
// disabled it for.
func (p Patch) Apply(s *Subscription) {
	set(&s.URL, p.URL)
	set(&s.Topic, p.Topic)
	set(&s.Secret, p.Secret)
	set(&s.Description, p.Description)
	set(&s.Team, p.Team)
	set(&s.Sources, p.Sources)
	set(&s.EventTypes, p.EventTypes)
	set(&s.Enabled, p.Enabled)
	set(&s.Ordered, p.Ordered)
	set(&s.MaxInFlight, p.MaxInFlight)
	set(&s.RateLimit, p.RateLimit)
	set(&s.BatchMax, p.BatchMax)
	set(&s.BatchWait, p.BatchWait)
	set(&s.Filter, p.Filter)
	set(&s.Transform, p.Transform)
	set(&s.Headers, p.Headers)
	set(&s.Schedule, p.Schedule)
	set(&s.Timeout, p.Timeout)
	if p.Enabled != nil && *p.Enabled {
		s.DisabledReason = ""
	}
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// HeaderChange sets some of a subscription's static headers and removes
// others, keeping the rest: what subscriptions update --header and
// --unset-header, and the console's form, change.
type HeaderChange struct {
	Set   map[string]string
	Unset []string
}

// Apply changes the headers of s, leaving the map s had untouched.
func (h HeaderChange) Apply(s *Subscription) {
	if len(h.Set) == 0 && len(h.Unset) == 0 {
		return
	}
	headers := maps.Clone(s.Headers)
	if headers == nil {
		headers = make(map[string]string, len(h.Set))
	}
	maps.Copy(headers, h.Set)
	for _, name := range h.Unset {
		delete(headers, name)
	}
	s.Headers = headers
}
