package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/topics"
)

// TestRunExportsTraces: `hookstream run` with OTEL_EXPORTER_OTLP_ENDPOINT
// exports, under OTEL_SERVICE_NAME, the receiver's span continuing the
// provider's traceparent and the processor's span, its child, whose
// context the events record carries.
func TestRunExportsTraces(t *testing.T) {
	t.Parallel()
	const traceID, provider = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	recv := otlptest.New(t)
	d := newEmbedded(t)
	d.extra = map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL,
		"OTEL_SERVICE_NAME":           "hookstream-e2e",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	d.run(t, "hookstream run")

	req, _ := http.NewRequest(http.MethodPost, "http://"+d.httpAddr+"/webhooks/github", strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", "d-1")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("traceparent", "00-"+traceID+"-"+provider+"-01")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: got %d, want 202", resp.StatusCode)
	}

	ingestName, processName := "POST /webhooks/:source", "process "+string(d.kafka.Names.Ingest)
	var byName map[string]otlptest.Span
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		byName = map[string]otlptest.Span{}
		for _, s := range recv.Trace(traceID) {
			byName[s.Name] = s
		}
		if _, ok := byName[processName]; !ok {
			return fmt.Errorf("spans of the trace: got %+v, want %q and %q", byName, ingestName, processName)
		}
		return nil
	})
	in, pr := byName[ingestName], byName[processName]
	if in.ParentID != provider || in.Service != "hookstream-e2e" {
		t.Errorf("receiver span: got parent %s service %q, want %s and hookstream-e2e", in.ParentID, in.Service, provider)
	}
	if pr.ParentID != in.SpanID {
		t.Errorf("processor span's parent: got %s, want the receiver's %s", pr.ParentID, in.SpanID)
	}
	events := d.kafka.Records(t, d.kafka.Names.Events)
	if len(events) != 1 {
		t.Fatalf("events: got %d records, want 1", len(events))
	}
	if got, want := kafkatest.Headers(events[0])[topics.HeaderTraceparent], "00-"+traceID+"-"+pr.SpanID+"-01"; got != want {
		t.Errorf("events record's %s: got %q, want %q", topics.HeaderTraceparent, got, want)
	}
}
