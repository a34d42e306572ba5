package topics

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EnvelopeSchemaVersion is the version of the envelope's JSON Schema
// (schemas/envelope.json) that Marshal writes, <major>.<minor>: a field
// added bumps the minor, a field removed, renamed or changed in meaning
// bumps the major.
const EnvelopeSchemaVersion = "1.0"

// Envelope is the value of an events record and the body of every
// delivery: one processed webhook with its provenance.
type Envelope struct {
	// SchemaVersion is the schema version of a parsed envelope. Marshal
	// always writes EnvelopeSchemaVersion, the version of the fields it
	// writes.
	SchemaVersion string `json:"schema_version"`
	// ID is the record key, <source>:<event-id>: stable across retries and replays.
	ID          string    `json:"id"`
	Source      string    `json:"source"`
	EventID     string    `json:"event_id"`
	Type        string    `json:"type"`
	ReceivedAt  time.Time `json:"received_at"`
	ProcessedAt time.Time `json:"processed_at"`
	// Replay counts the times this event was emitted again after its
	// first emission, when the processor re-read its ingest record (a
	// replay of the processor's offsets); 0 on the first emission.
	Replay int `json:"replay,omitempty"`
	// RedrivenFrom names the dead letter, <dlq topic>/<partition>/<offset>,
	// whose redrive put this event back into the pipeline.
	RedrivenFrom string `json:"redriven_from,omitempty"`
	ContentType  string `json:"content_type,omitempty"`
	// Headers are the provider headers the receiver carried, by lowercased name.
	Headers map[string]string `json:"headers,omitempty"`
	// Data is the provider's JSON body, verbatim.
	Data json.RawMessage `json:"data,omitempty"`
	// DataBase64 is a body that is not JSON.
	DataBase64 []byte `json:"data_base64,omitempty"`
	// Form is a form-encoded body decoded: a string per single-valued
	// field, an array of strings per repeated field.
	Form map[string]any `json:"form,omitempty"`
}

// SetBody stores body in Data when it is JSON, else in DataBase64, with
// Form for form-encoded bodies.
func (e *Envelope) SetBody(body []byte, contentType string, isJSON bool) {
	if isJSON {
		e.Data = body
		return
	}
	e.DataBase64 = body
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return
	}
	values, err := url.ParseQuery(string(body))
	if err != nil || len(values) == 0 {
		return
	}
	e.Form = make(map[string]any, len(values))
	for k, v := range values {
		if len(v) == 1 {
			e.Form[k] = v[0]
		} else {
			e.Form[k] = v
		}
	}
}

// Body returns the provider's body as it arrived.
func (e *Envelope) Body() []byte {
	if e.Data != nil {
		return e.Data
	}
	return e.DataBase64
}

// Marshal encodes the envelope. It writes the same JSON as encoding/json
// would, without reflection and without re-compacting Data, which SetBody's
// callers have validated: envelopes are built once per event on the
// processor's hot path.
func (e *Envelope) Marshal() ([]byte, error) {
	b := make([]byte, 0, 256+len(e.Data)+len(e.DataBase64)*4/3)
	b = append(b, `{"schema_version":"`+EnvelopeSchemaVersion+`","id":`...)
	b = AppendJSONString(b, e.ID)
	b = append(b, `,"source":`...)
	b = AppendJSONString(b, e.Source)
	b = append(b, `,"event_id":`...)
	b = AppendJSONString(b, e.EventID)
	b = append(b, `,"type":`...)
	b = AppendJSONString(b, e.Type)
	b = append(b, `,"received_at":"`...)
	b = e.ReceivedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","processed_at":"`...)
	b = e.ProcessedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if e.Replay != 0 {
		b = append(b, `,"replay":`...)
		b = strconv.AppendInt(b, int64(e.Replay), 10)
	}
	if e.RedrivenFrom != "" {
		b = append(b, `,"redriven_from":`...)
		b = AppendJSONString(b, e.RedrivenFrom)
	}
	if e.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = AppendJSONString(b, e.ContentType)
	}
	if len(e.Headers) > 0 {
		b = append(b, `,"headers":{`...)
		for i, k := range slices.Sorted(maps.Keys(e.Headers)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, k)
			b = append(b, ':')
			b = AppendJSONString(b, e.Headers[k])
		}
		b = append(b, '}')
	}
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	if len(e.DataBase64) > 0 {
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.DataBase64)
		b = append(b, '"')
	}
	if len(e.Form) > 0 {
		form, err := json.Marshal(e.Form)
		if err != nil {
			return nil, fmt.Errorf("envelope: form: %w", err)
		}
		b = append(b, `,"form":`...)
		b = append(b, form...)
	}
	return append(b, '}'), nil
}

// AppendJSONString appends s as a JSON string, escaped as encoding/json does
// (HTML characters included, invalid UTF-8 replaced).
func AppendJSONString(b []byte, s string) []byte { return appendJSONString(b, s, true) }

// AppendJSONText appends s as a JSON string, escaped as encoding/json does
// with SetEscapeHTML(false): <, > and & stay as they are, so a link in a
// message a subscriber reads stays readable.
func AppendJSONText(b []byte, s string) []byte { return appendJSONString(b, s, false) }

func appendJSONString(b []byte, s string, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// ParseEnvelope decodes an envelope; it requires an id.
func ParseEnvelope(b []byte) (*Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if e.ID == "" || !strings.Contains(e.ID, ":") {
		return nil, fmt.Errorf("envelope: id %q is not <source>:<event-id>", e.ID)
	}
	return &e, nil
}
