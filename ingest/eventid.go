package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hookstream/hookstream/signature"
)

// Event ids and types: the configured event_id / event_type specs of a
// source (header:, json:, template:, preset:gitlab), compiled once at start,
// and the default chain used when a source configures none.
//
// This file holds EventID and EventType, the default chain (which ends in
// the body's hash) and the length limits. A spec is parsed into a Field in
// eventid_field.go; each form reads its value in its own file:
// eventid_header.go, eventid_json.go, eventid_template.go and
// eventid_gitlab.go (preset:gitlab).
//
// JSON values are read from the request body in place: lookups alias the body
// and only the returned id or type is copied, so deriving an id costs at most
// one allocation; one more for an id longer than 200 bytes (copied to be
// hashed) or a JSON string with escapes (unescaped, then copied).

// maxEventIDLen is the longest event id or type kept as it is, in bytes.
// Longer ids are replaced by their hash, longer types are cut.
const maxEventIDLen = 200

// eventIDHashPrefix starts ids made from a hash: of the body when nothing else
// identifies the event, of the id itself when it is too long.
const eventIDHashPrefix = "sha256:"

// defaultIDHeaders are the headers of the default id chain in order, in
// canonical form: Idempotency-Key, X-Event-ID, webhook-id, X-GitHub-Delivery,
// X-Shopify-Event-Id, X-Shopify-Webhook-Id, X-Gitlab-Event-UUID.
var defaultIDHeaders = [...]string{
	"Idempotency-Key",
	"X-Event-Id",
	signature.HeaderID,
	"X-Github-Delivery",
	"X-Shopify-Event-Id",
	"X-Shopify-Webhook-Id",
	gitlabUUIDHeader,
}

// defaultIDPaths are the top-level JSON fields of the default id chain, tried
// after the headers.
var defaultIDPaths = [...]string{"id", "event_id", "messageId"}

// defaultEventTypePath is the JSON field of the default event type.
const defaultEventTypePath = "type"

// DefaultIDHeaders lists the headers of the default id chain (canonical
// form), in the order they are tried, for the record's header allow-list.
var DefaultIDHeaders = slices.Clone(defaultIDHeaders[:])

// Payload is the part of a request that ids and types are read from.
type Payload struct {
	// Header holds the request headers, keyed by canonical name as net/http
	// stores them.
	Header http.Header
	// Body is the raw request body. It is only read.
	Body []byte
	// JSON reports that Body is valid JSON nested at most
	// topics.MaxJSONDepth deep (the handler checks with topics.CheckJSON
	// once). JSON parts are missing when it is false.
	JSON bool
}

// EventID derives the event id. With f non-nil it is f's value, with no
// fallback: ok is false when f yields nothing. With f nil it is the first
// that exists of: the headers of DefaultIDHeaders; the JSON fields id,
// event_id, messageId (only when p.JSON); "sha256:" + hex(sha256(body)).
// Ids longer than 200 bytes become "sha256:" + hex(sha256(id)).
func EventID(f *Field, p *Payload) (string, bool) {
	if f != nil {
		id, ok := f.value(p)
		if !ok {
			return "", false
		}
		return limitEventID(id, f.fromBody()), true
	}
	for _, h := range defaultIDHeaders {
		if v := fieldHeaderValue(p.Header, h); v != "" {
			return limitEventID(v, false), true
		}
	}
	if p.JSON {
		for _, path := range defaultIDPaths {
			if v, ok := lookupTopLevelField(p.Body, path); ok {
				return limitEventID(v, true), true
			}
		}
	}
	return hashEventID(p.Body), true
}

// EventType derives the event type: f's value when f is non-nil and yields
// one, else the JSON field type (when p.JSON), else source. Types longer than
// 200 bytes are cut to at most 200 bytes at a UTF-8 boundary.
func EventType(f *Field, p *Payload, source string) string {
	if v, ok := f.value(p); ok {
		return limitEventType(v, f.fromBody())
	}
	if p.JSON {
		if v, ok := lookupTopLevelField(p.Body, defaultEventTypePath); ok {
			return limitEventType(v, true)
		}
	}
	return limitEventType(source, false)
}

// limitEventID returns id, detached (see detach), or its hash when it is
// longer than maxEventIDLen.
func limitEventID(id string, fromBody bool) string {
	if len(id) > maxEventIDLen {
		// Copying id costs about 0.4 µs more at 300 bytes (0.95 against
		// 0.53 µs with an unsafe view of it, 8 alternating runs on 2
		// loaded cores); such ids are rare (providers' are tens of bytes)
		// and BenchmarkEventID has none, so there is no unsafe view here.
		return hashEventID([]byte(id))
	}
	return detach(id, fromBody)
}

// hashEventID returns "sha256:" + the hex SHA-256 of b, in one allocation.
func hashEventID(b []byte) string {
	sum := sha256.Sum256(b)
	var buf [len(eventIDHashPrefix) + 2*sha256.Size]byte
	copy(buf[:], eventIDHashPrefix)
	hex.Encode(buf[len(eventIDHashPrefix):], sum[:])
	return string(buf[:])
}

// limitEventType returns typ, detached (see detach), cut to at most
// maxEventIDLen bytes. The cut backs up to the start of a UTF-8 sequence so
// that a valid type stays valid; on bytes that are not UTF-8 it cuts at
// maxEventIDLen.
func limitEventType(typ string, fromBody bool) string {
	if len(typ) > maxEventIDLen {
		cut := maxEventIDLen
		for i := maxEventIDLen; i > maxEventIDLen-utf8.UTFMax && i > 0; i-- {
			if utf8.RuneStart(typ[i]) {
				cut = i
				break
			}
		}
		typ = typ[:cut]
	}
	return detach(typ, fromBody)
}

// detach returns s, copied when fromBody says it was read from the request
// body in place, so that a result never pins or shares the body. Where a
// value comes from says whether it points into the body: values of the
// json: form and of the default chain's JSON fields do, headers, templates
// and presets do not. So no pointers are compared through package unsafe:
// BenchmarkEventID took 0.83 to 1.01 of the time it did with that
// comparison (by id kind, medians of the ratios of 8 alternating runs on
// 2 loaded cores), with the same allocations.
func detach(s string, fromBody bool) string {
	if fromBody {
		return strings.Clone(s)
	}
	return s
}
