package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/signature"
)

func newSecretKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// verifyingSubscriber is a subscriber endpoint that counts the deliveries
// whose Standard Webhooks signature verifies with secret.
type verifyingSubscriber struct {
	*httptest.Server
	mu       sync.Mutex
	verified map[string]int // by webhook-id
	rejected int
}

func newVerifyingSubscriber(t *testing.T, secret string) *verifyingSubscriber {
	t.Helper()
	key, err := signature.DecodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	s := &verifyingSubscriber{verified: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, err := signature.VerifyRequest(r.Header, [][]byte{key}, body, time.Now(), time.Minute); err != nil {
			s.rejected++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		s.verified[r.Header.Get(signature.HeaderID)]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *verifyingSubscriber) waitVerified(t *testing.T, p *process, id string) {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		p.mustBeAlive(t)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.verified[id] == 0 {
			return fmt.Errorf("%s not delivered with a valid signature (verified %v, rejected %d)", id, s.verified, s.rejected)
		}
		return nil
	})
}

// TestSecretKeyAtRest: with HOOKSTREAM_SECRET_KEY the CLI writes the
// subscription's secret encrypted (the raw records of the compacted topic
// hold no plaintext secret); `hookstream run` with the key delivers
// signatures the subscriber verifies, before and after a restart; a wrong
// key fails the start, and the CLI without the key fails, each with one
// line naming HOOKSTREAM_SECRET_KEY.
func TestSecretKeyAtRest(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	key := newSecretKey(t)
	d.extra = map[string]string{"HOOKSTREAM_SECRET_KEY": key}
	secret := signature.NewSecret()
	sub := newVerifyingSubscriber(t, secret)
	p := d.run(t, "hookstream run")

	cli := func(env map[string]string, args ...string) (string, string, int) {
		t.Helper()
		return lagReplayRun(t, env, args...)
	}
	if out, errOut, code := cli(d.env(), "subscriptions", "add", "--url", sub.URL+"/hook", "--secret", secret, "--output", "json"); code != 0 || !strings.Contains(out, secret) {
		t.Fatalf("subscriptions add: exit %d, stdout %q, stderr %q; want the subscription printed with its secret", code, out, errOut)
	}
	recs := d.kafka.Records(t, d.kafka.Names.Subscriptions)
	if len(recs) == 0 {
		t.Fatal("no subscription record")
	}
	for _, r := range recs {
		if bytes.Contains(r.Value, []byte(strings.TrimPrefix(secret, "whsec_"))) || !bytes.Contains(r.Value, []byte(`"secret":"enc:v1:`)) {
			t.Errorf("subscription record %d: %s, want the secret as enc:v1: and nowhere in plaintext", r.Offset, r.Value)
		}
	}

	d.mustAccept(t, "sec-1", `{"type":"push"}`)
	sub.waitVerified(t, p, "github:sec-1")
	if code := p.stop(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM: got %d, want 0", code)
	}
	p = d.run(t, "hookstream run again")
	d.mustAccept(t, "sec-2", `{"type":"push"}`)
	sub.waitVerified(t, p, "github:sec-2")

	// The CLI reads the topic directly: without the key it cannot.
	noKey := d.env()
	delete(noKey, "HOOKSTREAM_SECRET_KEY")
	_, errOut, code := cli(noKey, "subscriptions", "list")
	if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "HOOKSTREAM_SECRET_KEY is not set") {
		t.Errorf("subscriptions list without the key: exit %d, stderr %q; want exit 1 and one line saying HOOKSTREAM_SECRET_KEY is not set", code, errOut)
	}
	if code := p.stop(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM: got %d, want 0", code)
	}

	d.extra["HOOKSTREAM_SECRET_KEY"] = newSecretKey(t)
	wrong := startProcess(t, "hookstream run with a wrong key", d.env(), "run")
	select {
	case <-wrong.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("hookstream run with a wrong key still running after 60s, want it to fail")
	}
	lines := strings.Split(strings.TrimSpace(wrong.output.String()), "\n")
	last := lines[len(lines)-1]
	if code := wrong.cmd.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(last, "hookstream: ") || !strings.Contains(last, "HOOKSTREAM_SECRET_KEY") {
		t.Errorf("run with a wrong key: exit %d, last line %q; want exit 1 and a line naming HOOKSTREAM_SECRET_KEY", code, last)
	}
}

// TestHTTPSRequiredOffTheEmbeddedBroker: on a Kafka cluster
// (HOOKSTREAM_BROKERS set) a subscription with an http URL is refused by
// default with one line saying why, and nothing is written.
func TestHTTPSRequiredOffTheEmbeddedBroker(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix, "HOOKSTREAM_PARTITIONS": "3"}
	_, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--url", "http://hooks.example.com/hook")
	if want := "hookstream: invalid subscription: url: must be https (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS)\n"; code != 1 || errOut != want {
		t.Errorf("add with an http URL: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	if out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "list"); code != 0 || out != "no subscriptions\n" {
		t.Errorf("subscriptions list: exit %d, stdout %q, stderr %q; want no subscriptions", code, out, errOut)
	}
	cliEnv["HOOKSTREAM_DELIVERY_REQUIRE_HTTPS"] = "false"
	if out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--url", "http://hooks.example.com/hook"); code != 0 {
		t.Errorf("add with https not required: exit %d, stdout %q, stderr %q; want it created", code, out, errOut)
	}
}

// TestSubscriptionsAddVerify: --verify creates the subscription only when
// its endpoint answers the signed challenge: `hookstream sink` does; an
// endpoint that answers 204 without the challenge is refused with one
// line and nothing is written.
func TestSubscriptionsAddVerify(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_DELIVERY_ALLOW_PRIVATE": "true"}
	secret := signature.NewSecret()
	sinkAddr := kafkatest.FreeAddr(t)
	sink := startProcess(t, "hookstream sink", nil, "sink", "--addr", sinkAddr, "--secret", secret)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		sink.mustBeAlive(t)
		if !strings.Contains(sink.output.String(), "sink listening") {
			return fmt.Errorf("sink not listening yet")
		}
		return nil
	})

	out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--verify", "--url", "http://"+sinkAddr+"/", "--secret", secret, "--output", "json")
	var created struct{ ID, URL string }
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created.ID == "" {
		t.Fatalf("add --verify to the sink: exit %d, stdout %q, stderr %q; want it created", code, out, errOut)
	}
	if !strings.Contains(sink.output.String(), "verification") {
		t.Errorf("sink output %q: want the verification it answered", sink.output)
	}

	mute := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer mute.Close()
	_, errOut, code = lagReplayRun(t, cliEnv, "subscriptions", "add", "--verify", "--url", mute.URL+"/hook")
	if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "did not echo the challenge") {
		t.Errorf("add --verify to an endpoint that does not answer the challenge: exit %d, stderr %q; want exit 1 and one line", code, errOut)
	}
	out, errOut, code = lagReplayRun(t, cliEnv, "subscriptions", "list", "--output", "json")
	var subs []struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &subs) != nil || len(subs) != 1 || subs[0].ID != created.ID {
		t.Errorf("subscriptions list: exit %d, stdout %q, stderr %q; want only %s", code, out, errOut, created.ID)
	}
}
