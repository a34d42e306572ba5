package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestEnvelopesMatchSchema: the envelopes the processor builds, of every
// body kind and with every mark, are valid; envelopes that break the
// contract are not.
func TestEnvelopesMatchSchema(t *testing.T) {
	names := topics.NewNames("t")
	record := func(contentType, body string, headers ...kgo.RecordHeader) *kgo.Record {
		r := kafkatest.IngestRecord(names, "shop", "e1", body)
		for i, h := range r.Headers {
			if h.Key == topics.HeaderContentType {
				r.Headers[i].Value = []byte(contentType)
			}
		}
		r.Headers = append(r.Headers, headers...)
		return r
	}
	valid := []struct {
		name   string
		r      *kgo.Record
		replay int
	}{
		{"json", record("application/json", `{"id":"e1","n":[1,2]}`), 0},
		{"json scalar", record("application/json", `"text"`), 0},
		{"xml", record("application/xml", `<a>é</a>`), 0},
		{"form", record("application/x-www-form-urlencoded", "a=1&b=x&b=y"), 0},
		{"replay", record("application/json", `{}`), 2},
		{"redriven", record("application/json", `{}`, kgo.RecordHeader{Key: topics.HeaderRedrivenFrom, Value: []byte("t.dlq/3/17")}), 0},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			env, err := topics.NewEnvelope(tt.r, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			env.Replay = tt.replay
			ev, err := topics.EventRecord(names.Events, tt.r, env)
			if err != nil {
				t.Fatal(err)
			}
			if err := kafkatest.ValidateEnvelope(ev.Value); err != nil {
				t.Errorf("%s: %v", ev.Value, err)
			}
		})
	}

	const ok = `"schema_version":"1.0","id":"s:1","source":"s","event_id":"1","type":"t","received_at":"2026-11-21T10:00:00.123456789Z","processed_at":"2026-11-21T10:00:00.2Z"`
	invalid := []struct {
		name, envelope, want string
	}{
		{"not JSON", `{`, "not JSON"},
		{"no schema version", `{"id":"s:1","source":"s","event_id":"1","type":"t","received_at":"2026-11-21T10:00:00Z","processed_at":"2026-11-21T10:00:00Z","data":{}}`, "schema_version"},
		{"another major", strings.Replace(`{`+ok+`,"data":{}}`, `"1.0"`, `"2.0"`, 1), "schema_version"},
		{"id without source", strings.Replace(`{`+ok+`,"data":{}}`, `"s:1"`, `"s1"`, 1), "id"},
		{"time not RFC 3339", strings.Replace(`{`+ok+`,"data":{}}`, `"2026-11-21T10:00:00.2Z"`, `"yesterday"`, 1), "processed_at"},
		{"no body", `{` + ok + `}`, "oneOf"},
		{"both bodies", `{` + ok + `,"data":{},"data_base64":"eA=="}`, "oneOf"},
		{"replay 0", `{` + ok + `,"replay":0,"data":{}}`, "replay"},
		{"bad base64", `{` + ok + `,"data_base64":"%%"}`, "data_base64"},
		{"form without data_base64", `{` + ok + `,"data":{},"form":{"a":"1"}}`, "form"},
		{"header not a string", `{` + ok + `,"headers":{"x-a":1},"data":{}}`, "headers"},
		{"undeclared field", `{` + ok + `,"data":{},"extra":true}`, "extra"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			err := kafkatest.ValidateEnvelope([]byte(tt.envelope))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
