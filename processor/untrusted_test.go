package processor_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestBodyMarkedJSONIsChecked: a raw producer on the ingest topic cannot
// make the processor take a body as JSON by marking it so (hs-body-json,
// the mark receivers once wrote): a body that does not check as JSON,
// spliced JSON and a body nested deeper than topics.MaxJSONDepth alike, is
// carried as data_base64, so that no event is emitted under a forged id
// and the other events of the batch are whole.
func TestBodyMarkedJSONIsChecked(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	marked := func(id, body string) *kgo.Record {
		r := ingestRecord(env, "stripe", id, body)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "hs-body-json", Value: []byte("true")})
		return r
	}
	spliced := `{"a":1},"id":"stripe:evt_forged"`
	deep := strings.Repeat("[", topics.MaxJSONDepth+1) + strings.Repeat("]", topics.MaxJSONDepth+1)
	produce(t, env.Client(t),
		ingestRecord(env, "stripe", "evt_1", `{"n":1}`),
		marked("evt_2", spliced),
		marked("evt_3", deep),
		ingestRecord(env, "stripe", "evt_4", `{"n":4}`),
	)
	start(t, env, options{name: "a", stateDir: t.TempDir()})
	got := waitEvents(t, env, 4, 30*time.Second)
	exactlyOnce(t, got, 4, 1)

	want := map[string]string{"stripe:evt_2": spliced, "stripe:evt_3": deep}
	for _, r := range env.Records(t, env.Names.Events) {
		kafkatest.CheckEnvelope(t, r)
		var e struct {
			ID         string          `json:"id"`
			Data       json.RawMessage `json:"data"`
			DataBase64 []byte          `json:"data_base64"`
		}
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("%s: envelope is not JSON: %v", r.Key, err)
		}
		if e.ID != string(r.Key) {
			t.Errorf("%s: envelope id %q, want the record key", r.Key, e.ID)
		}
		body, isBase64 := want[string(r.Key)]
		switch {
		case isBase64 && (e.Data != nil || !bytes.Equal(e.DataBase64, []byte(body))):
			t.Errorf("%s: got data %.40s data_base64 %.40q, want the body as data_base64 only", r.Key, e.Data, e.DataBase64)
		case !isBase64 && e.Data == nil:
			t.Errorf("%s: got no data, want the JSON body", r.Key)
		}
	}
}
