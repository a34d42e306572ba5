package ingest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// orderSchema wants an object with a string id, a non-negative integer
// amount and string tags, and allows no other property.
const orderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["id", "amount"],
  "properties": {
    "type": {"type": "string"}, "id": {"type": "string"}, "amount": {"type": "integer", "minimum": 0},
    "tags": {"type": "array", "items": {"type": "string"}}
  },
  "additionalProperties": false
}`

// newValidatingReceiver is a receiver whose sources, loaded from a file,
// validate order.* events of "strict" (reject) and "lenient" (dlq) against
// orderSchema; "forms" and "signed" validate every event type, "signed"
// after verifying GitHub signatures.
func newValidatingReceiver(t *testing.T) *receiver {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "order.json"), []byte(orderSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `
sources:
  strict:
    event_type: json:type
    validate: {schemas: {"order.*": order.json}, on_invalid: reject}
  lenient:
    event_type: json:type
    validate: {schemas: {"order.*": order.json}, on_invalid: dlq}
  forms:
    validate: {schemas: {"*": order.json}}
  signed:
    verify: {scheme: github, secret: ` + githubSecret + `}
    event_id: header:X-GitHub-Delivery
    event_type: header:X-GitHub-Event
    validate: {schemas: {"*": order.json}}
`
	path := filepath.Join(dir, "sources.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	sources, err := ingest.LoadSources(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return newReceiver(t, kafkatest.New(t, 3, 64<<10), ingest.Config{Sources: sources})
}

// answer is a decoded ingest answer.
type answer struct {
	status     int
	Status     string             `json:"status"`
	ID         string             `json:"id"`
	Error      string             `json:"error"`
	Violations []topics.Violation `json:"violations"`
	RequestID  string             `json:"request_id"`
}

func (vr *receiver) postValidated(t *testing.T, source string, header http.Header, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, vr.srv.URL+"/webhooks/"+source, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{"Content-Type": {"application/json"}}
	}
	resp, err := vr.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("answer %q is not JSON: %v", raw, err)
	}
	return a
}

// invalid reads hookstream_ingest_invalid_payloads_total of source and action.
func (vr *receiver) invalid(t *testing.T, source, action string) float64 {
	t.Helper()
	families, err := vr.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "hookstream_ingest_invalid_payloads_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestSchemaViolationsRejected(t *testing.T) {
	vr := newValidatingReceiver(t)
	many := `{"type":"order.created","id":"o1","amount":1,"tags":[0,1,2,3,4,5,6,7,8,9,10,11]}`
	tests := []struct {
		name, source, body string
		wantPaths          []string
	}{
		{"one violation", "strict", `{"type":"order.created","id":"o1","amount":-5}`, []string{"/amount"}},
		{"several", "strict", `{"type":"order.paid","amount":"5","extra":1}`, []string{"", "", "/amount"}},
		{"more than ten, cut to ten", "strict", many,
			[]string{"/tags/0", "/tags/1", "/tags/10", "/tags/11", "/tags/2", "/tags/3", "/tags/4", "/tags/5", "/tags/6", "/tags/7"}},
		{"not JSON", "forms", `type=order.created`, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := http.Header{"Content-Type": {"application/json"}}
			if tt.name == "not JSON" {
				header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			a := vr.postValidated(t, tt.source, header, tt.body)
			if a.status != http.StatusUnprocessableEntity || a.Error != "payload does not match the schema" || a.RequestID == "" {
				t.Fatalf("answer: got %d %+v, want 422 payload does not match the schema with a request id", a.status, a)
			}
			var paths []string
			for _, v := range a.Violations {
				paths = append(paths, v.Path)
				if v.Message == "" {
					t.Errorf("violation at %q without a message", v.Path)
				}
			}
			if tt.name == "not JSON" && a.Violations[0].Message != "body is not JSON" {
				t.Errorf("violation: got %+v, want body is not JSON", a.Violations[0])
			}
			if fmt.Sprint(paths) != fmt.Sprint(tt.wantPaths) {
				t.Errorf("violation paths: got %q (%+v), want %q", paths, a.Violations, tt.wantPaths)
			}
		})
	}
	if a := vr.postValidated(t, "strict", nil, `{"type":"order.created","id":"o1","amount":5}`); a.status != http.StatusAccepted {
		t.Errorf("valid payload: got %d %+v, want 202", a.status, a)
	}
	if a := vr.postValidated(t, "strict", nil, `{"type":"customer.created","anything":true}`); a.status != http.StatusAccepted {
		t.Errorf("payload of a type without schema: got %d %+v, want 202", a.status, a)
	}
	recs := vr.env.Records(t, vr.env.Names.Ingest)
	if len(recs) != 2 {
		t.Fatalf("ingest records: got %d, want only the 2 accepted", len(recs))
	}
	for _, r := range recs {
		if v := kafkatest.Headers(r)[topics.HeaderViolations]; v != "" {
			t.Errorf("accepted record %s carries violations %s", r.Key, v)
		}
	}
	if got := vr.invalid(t, "strict", "reject"); got != 3 {
		t.Errorf("hookstream_ingest_invalid_payloads_total{source=strict,action=reject}: got %v, want 3", got)
	}
}

func TestSchemaViolationsMarkedForDLQ(t *testing.T) {
	vr := newValidatingReceiver(t)
	a := vr.postValidated(t, "lenient", nil, `{"type":"order.created","id":"o1","amount":-5}`)
	if a.status != http.StatusAccepted || a.Status != "accepted" || len(a.Violations) != 0 {
		t.Fatalf("answer: got %d %+v, want 202 accepted", a.status, a)
	}
	recs := vr.env.Records(t, vr.env.Names.Ingest)
	if len(recs) != 1 {
		t.Fatalf("ingest records: got %d, want 1", len(recs))
	}
	if got, want := kafkatest.Headers(recs[0])[topics.HeaderViolations], `[{"path":"/amount","message":"minimum: got -5, want 0"}]`; got != want {
		t.Errorf("header %s: got %s, want %s", topics.HeaderViolations, got, want)
	}
	if got := vr.invalid(t, "lenient", "dlq"); got != 1 {
		t.Errorf("hookstream_ingest_invalid_payloads_total{source=lenient,action=dlq}: got %v, want 1", got)
	}
}

// TestSignatureCheckedBeforeSchema: an unsigned request learns nothing of
// the schema: it gets 401, not the violations.
func TestSignatureCheckedBeforeSchema(t *testing.T) {
	vr := newValidatingReceiver(t)
	body := `{"amount":-5}`
	header := githubHeaders("d-1", body)
	header.Set("X-Hub-Signature-256", "sha256=00")
	if a := vr.postValidated(t, "signed", header, body); a.status != http.StatusUnauthorized || len(a.Violations) != 0 {
		t.Errorf("unsigned invalid payload: got %d %+v, want 401 without violations", a.status, a)
	}
	if a := vr.postValidated(t, "signed", githubHeaders("d-1", body), body); a.status != http.StatusUnprocessableEntity {
		t.Errorf("signed invalid payload: got %d %+v, want 422", a.status, a)
	}
}
