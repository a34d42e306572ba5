package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

const secret = "s3cret"

func post(t *testing.T, url, id, body, sig string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/github", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Event-ID", id)
	req.Header.Set("X-Hub-Signature-256", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func sign(body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func TestThinReceiver(t *testing.T) {
	env := kafkatest.Embedded(t, "thin", partitions, maxBody)
	cfg := ingest.Config{MaxBody: maxBody, AckTimeout: time.Second, Topic: env.Names.Ingest}
	h, err := newHandler(env.Client(t, ingest.ProducerOpts(cfg)...), cfg, secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	body := `{"id":"e1","type":"push"}`
	if got := post(t, srv.URL, "e1", body, sign(body)); got != http.StatusAccepted {
		t.Fatalf("signed POST: got status %d, want 202", got)
	}
	// The answer came after the broker's acknowledgement: the record is
	// there now, without waiting.
	recs := env.Records(t, env.Names.Ingest)
	if len(recs) != 1 || string(recs[0].Key) != "e1" || string(recs[0].Value) != body {
		t.Fatalf("ingest topic after a 202: got %v, want one record e1 with the body", describe(recs))
	}

	if got := post(t, srv.URL, "e2", body, sign(body+" ")); got != http.StatusUnauthorized {
		t.Errorf("POST with a wrong signature: got status %d, want 401", got)
	}
	if got := len(env.Records(t, env.Names.Ingest)); got != 1 {
		t.Errorf("records after a 401: got %d, want 1", got)
	}

	env.Cluster.Close()
	if got := post(t, srv.URL, "e3", body, sign(body)); got != http.StatusServiceUnavailable {
		t.Errorf("signed POST with the broker down: got status %d, want 503", got)
	}
}

func TestBare(t *testing.T) {
	srv := httptest.NewServer(bareHandler())
	t.Cleanup(srv.Close)
	if got := post(t, srv.URL, "e1", "{}", "unsigned"); got != http.StatusAccepted {
		t.Errorf("bare POST: got status %d, want 202", got)
	}
}

func describe(recs []*kgo.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Key)+"="+string(r.Value))
	}
	return out
}
