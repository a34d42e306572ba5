package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// TestDLQPagesReadAWindow: the dead-letter page shows letters of the
// newest offsets of each partition only, a letter older than that is not
// read but named with the command that shows it, and a redrive that asks
// for a wider range than a preview shows, or for offsets the DLQ's end
// has left far behind, is refused before anything is read.
func TestDLQPagesReadAWindow(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 1_005 {
		recs = append(recs, &kgo.Record{Topic: string(h.env.Names.DLQ), Partition: 0, Key: fmt.Appendf(nil, "shop:%04d", i), Value: []byte(`{"n":1}`),
			Headers: []kgo.RecordHeader{
				{Key: topics.HeaderErrorStage, Value: []byte(topics.StageProcess)},
				{Key: topics.HeaderError, Value: []byte("<b>no</b>")},
			}})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	a := b.get("/ui/dlq?kind=processor&key=shop:0004")
	if a.status != http.StatusOK || strings.Contains(a.body, "shop:0004</code>") || !strings.Contains(a.body, "No dead letters here") {
		t.Errorf("letter shop:0004 (offset 4) lies before the newest 1,000 offsets: got %d, want 200 without it:\n%s", a.status, a.body)
	}
	if a = b.get("/ui/dlq?kind=processor&key=shop:1004"); a.status != http.StatusOK || !strings.Contains(a.body, "shop:1004") || !strings.Contains(a.body, "&lt;b&gt;no&lt;/b&gt;") {
		t.Errorf("the newest letter: got %d, want it shown with its error as text:\n%s", a.status, a.body)
	}
	if a = b.get("/ui/dlq/processor/0/2"); a.status != http.StatusNotFound || !strings.Contains(a.body, "hookstream dlq show 0/2 --dlq processor") {
		t.Errorf("an old letter: got %d, want 404 naming the command that shows it:\n%s", a.status, a.body)
	}
	if a = b.get("/ui/dlq/processor/0/1004"); a.status != http.StatusOK || !strings.Contains(a.body, "shop:1004") {
		t.Errorf("the newest letter's page: got %d, want it:\n%s", a.status, a.body)
	}
	if a = b.get("/ui/dlq/redrive?kind=processor&key=shop:*"); a.status != http.StatusOK || !strings.Contains(a.body, "More than 500 letters match") || strings.Contains(a.body, "Execute") {
		t.Errorf("a preview of 1,000 letters: got %d, want it refused without Execute:\n%s", a.status, a.body)
	}
	for _, within := range []string{"0:0-1005", "0:5-1", "x", "0:1-2,0:3-4"} {
		a = b.post("/ui/dlq/redrive", url.Values{"csrf": {csrf}, "kind": {"processor"}, "key": {"shop:*"}, "within": {within}})
		if a.status != http.StatusBadRequest {
			t.Errorf("redrive within %q: got %d, want 400:\n%s", within, a.status, a.body)
		}
	}
	// A hand-made Execute naming old offsets, or one whose DLQ grew by
	// more than 1,000 letters since its preview: the DLQ's end lies more
	// than 1,000 offsets past the range, and the redrive reads nothing.
	a = b.post("/ui/dlq/redrive", url.Values{"csrf": {csrf}, "kind": {"processor"}, "key": {"shop:*"}, "within": {"0:0-4"}})
	if a.status != http.StatusConflict || !strings.Contains(a.body, "the dead letters changed: preview again") {
		t.Errorf("redrive within 0:0-4 of a DLQ ending at 1005: got %d, want 409 asking for a new preview:\n%s", a.status, a.body)
	}
	if got := h.env.Records(t, h.env.Names.Ingest); len(got) != 0 {
		t.Errorf("%s: got %d records, want none redriven", h.env.Names.Ingest, len(got))
	}
}
