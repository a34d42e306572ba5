package main

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// writeValidatingSources writes a sources file whose sources "strict"
// (on_invalid: reject) and "lenient" (on_invalid: dlq) validate order.*
// events against schemas/order.json, given by a path relative to the
// file's directory; schema is that file's content.
func writeValidatingSources(t *testing.T, schema string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "schemas"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schemas", "order.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `
sources:
  strict:
    event_type: json:type
    validate: {schemas: {"order.*": schemas/order.json}, on_invalid: reject}
  lenient:
    event_type: json:type
    validate: {schemas: {"order.*": schemas/order.json}, on_invalid: dlq}
`
	path := filepath.Join(dir, "sources.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// postJSON posts body to /webhooks/source and decodes the answer.
func postJSON(t *testing.T, httpAddr, source, body string) (int, map[string]any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+httpAddr+"/webhooks/"+source, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST /webhooks/%s: %v", source, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST /webhooks/%s: answer %q is not a JSON object: %v", source, raw, err)
	}
	return resp.StatusCode, out
}

// TestValidationThroughThePipeline runs `hookstream run` with validating
// sources: an invalid payload of a reject source is answered 422 and
// never reaches Kafka; an invalid payload of a dlq source is accepted,
// then dead-lettered with stage validate and its violations, never
// emitted; a valid one is emitted.
func TestValidationThroughThePipeline(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.extra = map[string]string{"HOOKSTREAM_CONFIG": writeValidatingSources(t,
		`{"type":"object","required":["id","amount"],"properties":{"id":{"type":"string"},"amount":{"type":"integer","minimum":0}}}`)}
	p := d.run(t, "hookstream run")
	names := d.kafka.Names

	status, answer := postJSON(t, d.httpAddr, "strict", `{"type":"order.created","id":"o1","amount":-5}`)
	violations, _ := json.Marshal(answer["violations"])
	if status != http.StatusUnprocessableEntity || answer["error"] != "payload does not match the schema" ||
		string(violations) != `[{"message":"minimum: got -5, want 0","path":"/amount"}]` || answer["request_id"] == "" {
		t.Errorf("invalid payload of a reject source: got %d %v, want 422 with the /amount violation", status, answer)
	}
	if status, answer := postJSON(t, d.httpAddr, "lenient", `{"type":"order.created","id":"o2","amount":-5}`); status != http.StatusAccepted {
		t.Errorf("invalid payload of a dlq source: got %d %v, want 202", status, answer)
	}
	if status, answer := postJSON(t, d.httpAddr, "lenient", `{"type":"order.created","id":"o3","amount":5}`); status != http.StatusAccepted {
		t.Errorf("valid payload: got %d %v, want 202", status, answer)
	}

	got := countKeys(t, d.kafka, names.Ingest)
	maps.DeleteFunc(got, func(k string, _ int) bool { return strings.HasPrefix(k, "hookstream:") }) // a dead letter's event
	if len(got) != 2 || got["lenient:o2"] != 1 || got["lenient:o3"] != 1 {
		t.Errorf("%s: got %v, want lenient:o2 and lenient:o3 only", names.Ingest, got)
	}
	waitProcessed(t, d.kafka, p, 30*time.Second)
	// Beside hookstream's own operational events (the dead letter's
	// event.dead_lettered), only the valid payload became an event.
	events := countKeys(t, d.kafka, names.Events)
	maps.DeleteFunc(events, func(k string, _ int) bool { return strings.HasPrefix(k, "hookstream:") })
	exactlyOnce(t, events, []string{"lenient:o3"})
	dlq := d.kafka.Records(t, names.DLQ)
	if len(dlq) != 1 || string(dlq[0].Key) != "lenient:o2" {
		t.Fatalf("%s: got %d letters, want lenient:o2 alone", names.DLQ, len(dlq))
	}
	h := kafkatest.Headers(dlq[0])
	if h[topics.HeaderErrorStage] != topics.StageValidate ||
		h[topics.HeaderViolations] != `[{"path":"/amount","message":"minimum: got -5, want 0"}]` ||
		h[topics.HeaderError] != "payload does not match the schema: /amount: minimum: got -5, want 0" {
		t.Errorf("dead letter headers: got %v, want stage validate, the violation and its cause", h)
	}
}

// TestBrokenSchemaFailsTheStart: a schema that does not compile stops
// `hookstream run` before it starts anything, with one line naming the
// file and the problem.
func TestBrokenSchemaFailsTheStart(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.extra = map[string]string{"HOOKSTREAM_CONFIG": writeValidatingSources(t, `{"type":"objekt"}`)}
	p := startProcess(t, "hookstream run", d.env(), "run")
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("hookstream run still running 30s after start, want it to fail")
	}
	out := strings.TrimSpace(p.output.String())
	if code := p.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code: got %d, want 1", code)
	}
	// Both sources use the file: one line for each.
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(out, "hookstream: HOOKSTREAM_CONFIG: ") {
		t.Errorf("output: got %q, want it to name HOOKSTREAM_CONFIG", out)
	}
	for i, source := range []string{"lenient", "strict"} {
		want := "sources." + source + ".validate.schemas[order.*]: schemas/order.json: not a valid JSON Schema: "
		if len(lines) != 2 || !strings.Contains(lines[i], want) {
			t.Errorf("output: got %q, want two lines, line %d containing %q", out, i+1, want)
		}
	}
}
