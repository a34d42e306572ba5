package dispatch_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

const handOffMaxBody = 4 << 10

// largest writes an event whose record is as large as the events topic
// accepts and returns its id.
func (h *harness) largest(t *testing.T) string {
	t.Helper()
	h.seq++
	id := "big:" + strconv.Itoa(h.seq)
	e := &topics.Envelope{ID: id, Source: "big", EventID: strconv.Itoa(h.seq), Type: "e",
		ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{"pad":""}`)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: string(h.env.Names.Events), Key: []byte(id), Value: v}
	pad := topics.MaxRecordBytes(handOffMaxBody) - topics.RecordBytes(rec)
	// Incompressible, so that compression cannot make it fit.
	noise := make([]byte, pad)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
	e.Data = []byte(`{"pad":"` + base64.RawStdEncoding.EncodeToString(noise)[:pad] + `"}`)
	if rec.Value, err = e.Marshal(); err != nil {
		t.Fatal(err)
	}
	if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("the events topic refused the largest event: %v", err)
	}
	return id
}

// TestLargestEventIsRetried: an event as large as the events topic takes
// fails once with a redirect to a long Location, which the attempt's error
// quotes; its retry, larger by the dispatcher's key and headers, is handed
// over and delivered, and the events behind it are not held up.
func TestLargestEventIsRetried(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 1, handOffMaxBody), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		MaxRecordBytes: topics.MaxHandOffBytes(handOffMaxBody)})
	sink := newSubscriber(t, func(id string, n int) int {
		if strings.HasPrefix(id, "big:") && n == 1 {
			return http.StatusFound
		}
		return http.StatusOK
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/elsewhere/"+strings.Repeat("a", 8<<10))
		sink.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	h.subscribe(t, subscriptions.Subscription{URL: srv.URL})
	big := h.largest(t)
	after := []string{h.event(t, "shop", "order"), h.event(t, "shop", "order")}
	sink.waitFor(t, after, 30*time.Second)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := sink.received()[big]; n != 2 {
			return fmt.Errorf("large event reached the subscriber %d times, want 2 (a failure, then its retry)", n)
		}
		return nil
	})
	if dlq := h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) != 0 {
		t.Errorf("delivery DLQ: got %d records, want none", len(dlq))
	}
}

// TestRefusedHandOffDeadLetters: delivery topics made smaller than the
// events topic (an older deployment) refuse the large event's retry and
// its whole dead letter for good; it is dead-lettered cut to fit, marked
// truncated, with the subscriber's answer, and its partition goes on.
func TestRefusedHandOffDeadLetters(t *testing.T) {
	env := kafkatest.New(t, 1, handOffMaxBody)
	const small = 64 << 10
	adm := kadm.NewClient(env.Client(t))
	v := strconv.Itoa(small)
	resp, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}},
		string(env.Names.DeliveryRetry), string(env.Names.DeliveryDLQ))
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("shrink delivery topics: %v", err)
	}
	h := newHarnessOn(t, env, dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		MaxRecordBytes: topics.MaxHandOffBytes(handOffMaxBody)})
	sink := newSubscriber(t, func(id string, _ int) int {
		if strings.HasPrefix(id, "big:") {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	big := h.largest(t)
	after := []string{h.event(t, "shop", "order"), h.event(t, "shop", "order")}
	sink.waitFor(t, after, 30*time.Second)
	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if dlq = h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) == 0 {
			return fmt.Errorf("no dead letter of the large event")
		}
		return nil
	})
	hd := kafkatest.Headers(dlq[0])
	if len(dlq) != 1 || hd[topics.HeaderTruncated] == "" || hd[topics.HeaderLastStatus] != "500" ||
		int64(len(dlq[0].Value)) >= topics.MaxRecordBytes(handOffMaxBody)/2 || !bytes.HasSuffix(dlq[0].Key, []byte(big)) {
		t.Errorf("dead letters: %d, first %s: %d bytes, headers %v; want one, of %s, cut, %s set, last status 500",
			len(dlq), dlq[0].Key, len(dlq[0].Value), hd, big, topics.HeaderTruncated)
	}
}
