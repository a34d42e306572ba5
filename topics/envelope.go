package topics

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"
)

// Envelope is the value of an events record and the body of every
// delivery: one processed webhook with its provenance.
type Envelope struct {
	// ID is the record key, <source>:<event-id>: stable across retries and replays.
	ID          string    `json:"id"`
	Source      string    `json:"source"`
	EventID     string    `json:"event_id"`
	Type        string    `json:"type"`
	ReceivedAt  time.Time `json:"received_at"`
	ProcessedAt time.Time `json:"processed_at"`
	ContentType string    `json:"content_type,omitempty"`
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

// Marshal encodes the envelope.
func (e *Envelope) Marshal() ([]byte, error) { return json.Marshal(e) }

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
