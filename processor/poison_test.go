package processor_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// waitDLQ waits until the DLQ holds want records and returns them.
func waitDLQ(t *testing.T, env *kafkatest.Env, want int) []*kgo.Record {
	t.Helper()
	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if dlq = env.Records(t, env.Names.DLQ); len(dlq) < want {
			return fmt.Errorf("dlq: %d records, want %d", len(dlq), want)
		}
		return nil
	})
	return dlq
}

// interleaved returns n ordinary events before each poison record and n
// after the last, all for partition 0.
func interleaved(env *kafkatest.Env, n int, poison ...*kgo.Record) []*kgo.Record {
	var recs []*kgo.Record
	for i := range n * (len(poison) + 1) {
		if i > 0 && i%n == 0 {
			recs = append(recs, poison[i/n-1])
		}
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	return recs
}

// checkSurvivors checks that each of the events ordinary events of
// interleaved is on the events topic exactly once, beside one dead letter
// per poison record, without the processor spinning on aborted
// transactions. It returns the dead letters by key.
func checkSurvivors(t *testing.T, env *kafkatest.Env, in *instance, events int, poison ...string) map[string]*kgo.Record {
	t.Helper()
	dlq := waitDLQ(t, env, len(poison))
	got := waitEvents(t, env, events, 30*time.Second)
	exactlyOnce(t, got, events, 1)
	letters := make(map[string]*kgo.Record, len(dlq))
	for _, r := range dlq {
		letters[string(r.Key)] = r
	}
	for _, k := range poison {
		if got[k] != 0 || letters[k] == nil {
			t.Errorf("%s: got %d events records and dead letter %v, want only a dead letter", k, got[k], letters[k] != nil)
		}
	}
	if len(dlq) != len(poison) {
		t.Errorf("dlq: got %d records, want %d", len(dlq), len(poison))
	}
	if n := in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > 3 {
		t.Errorf("aborted transactions: got %v, want at most 3 (the processor must not repeat the batch)", n)
	}
	if n := in.count("failed"); n != len(poison) {
		t.Errorf("failed: got %d, want %d", n, len(poison))
	}
	return letters
}

// lowerMaxMessageBytes misconfigures topic to refuse records over n bytes.
func lowerMaxMessageBytes(t *testing.T, env *kafkatest.Env, topic topics.Topic, n int) {
	t.Helper()
	setTopicConfig(t, env, topic, "max.message.bytes", strconv.Itoa(n))
}

// setTopicConfig sets one config of topic.
func setTopicConfig(t *testing.T, env *kafkatest.Env, topic topics.Topic, name, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resps, err := env.Admin(t).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: name, Value: kadm.StringPtr(value)}}, string(topic))
	if err == nil {
		_, err = resps.On(string(topic), func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("set %s of %s to %s: %v", name, topic, value, err)
	}
}

// bigEvent is a JSON event of about 40 KB that does not compress.
func bigEvent(env *kafkatest.Env, id string) *kgo.Record {
	noise := make([]byte, 30<<10)
	_, _ = rand.NewChaCha8([32]byte{2}).Read(noise)
	return ingestRecord(env, "shop", id, `{"pad":"`+base64.StdEncoding.EncodeToString(noise)+`"}`)
}

// formPost is a form post of \xff bytes whose envelope (base64 plus the
// escaped form, each \xff a \ufffd) is as long as the record limit allows,
// less room: the envelope fits, the events record with its key and headers
// cannot.
func formPost(t *testing.T, env *kafkatest.Env, limit, room int64) *kgo.Record {
	t.Helper()
	envelopeBytes := func(n int) int64 {
		r := ingestRecord(env, "slack", "poison", string(bytes.Repeat([]byte{0xff}, n)))
		r.Headers[4].Value = []byte("application/x-www-form-urlencoded")
		e, err := topics.NewEnvelope(r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(b))
	}
	n := 0
	for step := maxBody; step > 0; step /= 2 {
		if envelopeBytes(n+step) <= limit-room {
			n += step
		}
	}
	r := ingestRecord(env, "slack", "poison", string(bytes.Repeat([]byte{0xff}, n)))
	r.Headers[4].Value = []byte("application/x-www-form-urlencoded")
	return r
}

// TestNearLimitEnvelopeIsDeadLettered: a form post whose envelope fits the
// record limit but whose events record does not goes to the DLQ on its
// own, with the sizes in hs-error; the events before and after it in its
// partition are processed exactly once.
func TestNearLimitEnvelopeIsDeadLettered(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	limit := topics.MaxRecordBytes(maxBody)
	poison := formPost(t, env, limit, 64)
	if len(poison.Value) < 60<<10 {
		t.Fatalf("form post of %d bytes, want about 62 KB", len(poison.Value))
	}
	produce(t, env.Client(t), interleaved(env, 5, poison)...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	dlq := checkSurvivors(t, env, in, 10, "slack:poison")["slack:poison"]
	h := kafkatest.Headers(dlq)
	if !bytes.Equal(dlq.Value, poison.Value) || h[topics.HeaderTruncated] != "" {
		t.Errorf("dead letter: got %d value bytes (%s=%q), want the %d bytes of the body", len(dlq.Value),
			topics.HeaderTruncated, h[topics.HeaderTruncated], len(poison.Value))
	}
	if h[topics.HeaderErrorStage] != topics.StageProcess || !strings.Contains(h[topics.HeaderError], strconv.FormatInt(limit, 10)) ||
		!strings.Contains(h[topics.HeaderError], "exceeds the record limit") {
		t.Errorf("dead letter: got %s=%q %s=%q, want stage process and the size against the limit of %d",
			topics.HeaderErrorStage, h[topics.HeaderErrorStage], topics.HeaderError, h[topics.HeaderError], limit)
	}
}

// TestPermanentProduceErrorDeadLettersOneRecord: the events topic refuses
// records the processor's limit allows (its max.message.bytes is smaller):
// the broker fails the record's whole batch. The refused event alone is
// dead-lettered with the broker's error; its neighbours, which failed with
// it in the first attempt, are processed exactly once. When the DLQ's
// max.message.bytes refuses the dead letter too, a bare one (no body) takes
// its place, without another attempt.
func TestPermanentProduceErrorDeadLettersOneRecord(t *testing.T) {
	tests := []struct {
		name      string
		refuse    func(topics.Names) []topics.Topic
		wantBody  bool
		wantError string
	}{
		{"events topic refuses it", func(n topics.Names) []topics.Topic { return []topics.Topic{n.Events} }, true, "MESSAGE_TOO_LARGE"},
		{"DLQ refuses its letter too", func(n topics.Names) []topics.Topic { return []topics.Topic{n.Events, n.DLQ} }, false, "dead letter refused: produce to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := kafkatest.New(t, 1, maxBody)
			for _, topic := range tt.refuse(env.Names) {
				lowerMaxMessageBytes(t, env, topic, 16<<10)
			}
			big := bigEvent(env, "big")
			produce(t, env.Client(t), interleaved(env, 5, big)...)
			in := start(t, env, options{name: "a", stateDir: t.TempDir()})

			dlq := checkSurvivors(t, env, in, 10, "shop:big")["shop:big"]
			h := kafkatest.Headers(dlq)
			if got := bytes.Equal(dlq.Value, big.Value); got != tt.wantBody || h[topics.HeaderErrorStage] != topics.StageProcess ||
				!strings.Contains(h[topics.HeaderError], tt.wantError) {
				t.Errorf("dead letter: got %d bytes, %s=%q %s=%q; want the body: %v, stage process and %q", len(dlq.Value),
					topics.HeaderErrorStage, h[topics.HeaderErrorStage], topics.HeaderError, h[topics.HeaderError], tt.wantBody, tt.wantError)
			}
			if want := strconv.Itoa(len(big.Value)); !tt.wantBody && h[topics.HeaderTruncated] != want {
				t.Errorf("bare dead letter: got %s=%q, want %s", topics.HeaderTruncated, h[topics.HeaderTruncated], want)
			}
		})
	}
}

// TestRetryOfDeadLetteredEventInOnePoll: a provider's retry of an event,
// in the same poll, after the event is dead-lettered without state (the
// events topic refuses it) is no duplicate of an emission that never
// happened: its envelope, not built ahead for a likely duplicate, is built
// when it is decided, and it is dead-lettered the same way.
func TestRetryOfDeadLetteredEventInOnePoll(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	lowerMaxMessageBytes(t, env, env.Names.Events, 16<<10)
	produce(t, env.Client(t), interleaved(env, 5, bigEvent(env, "big"), bigEvent(env, "big"))...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	dlq := waitDLQ(t, env, 2)
	exactlyOnce(t, waitEvents(t, env, 15, 30*time.Second), 15, 1)
	for _, r := range dlq {
		if string(r.Key) != "shop:big" {
			t.Errorf("dead letter of %s, want only shop:big's", r.Key)
		}
	}
	if len(dlq) != 2 || in.count("failed") != 2 {
		t.Errorf("got %d dead letters and %d failed, want 2 of each", len(dlq), in.count("failed"))
	}
}

// TestRefusedLetterIsSentBare: the DLQ refuses a dead letter its
// max.message.bytes allows (here INVALID_RECORD, injected once): the
// record's next attempt writes a bare dead letter with the refusal, and
// its neighbours are processed exactly once.
func TestRefusedLetterIsSentBare(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	if env.Cluster == nil {
		t.Skip("injects a broker error into the in-process broker")
	}
	lowerMaxMessageBytes(t, env, env.Names.Events, 16<<10)
	// The dead letter's first write is refused, whatever else its produce
	// request carries.
	env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: string(env.Names.DLQ), Err: kerr.InvalidRecord})
	big := bigEvent(env, "big")
	produce(t, env.Client(t), interleaved(env, 5, big)...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	letter := checkSurvivors(t, env, in, 10, "shop:big")["shop:big"]
	h := kafkatest.Headers(letter)
	if h[topics.HeaderTruncated] != strconv.Itoa(len(big.Value)) || !strings.Contains(h[topics.HeaderError], "dead letter refused: produce to") ||
		!strings.Contains(h[topics.HeaderError], "INVALID_RECORD") {
		t.Errorf("dead letter: got %s=%q %s=%q, want the refusal and the body's size %d",
			topics.HeaderError, h[topics.HeaderError], topics.HeaderTruncated, h[topics.HeaderTruncated], len(big.Value))
	}
}

// TestPoisonRecordsTogether: records of every kind that cannot be
// processed, in one partition among ordinary events: each is dead-lettered
// on its own, within a bounded number of aborted transactions, and every
// other event is processed exactly once.
func TestPoisonRecordsTogether(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	lowerMaxMessageBytes(t, env, env.Names.Events, 16<<10)
	keyless := ingestRecord(env, "shop", "keyless", `{}`)
	keyless.Key = nil
	bigs := []*kgo.Record{bigEvent(env, "big1"), bigEvent(env, "big2")}
	produce(t, env.Client(t), interleaved(env, 3, bigs[0], keyless, formPost(t, env, topics.MaxRecordBytes(maxBody), 64), bigs[1])...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	letters := checkSurvivors(t, env, in, 15, "shop:big1", "", "slack:poison", "shop:big2")
	if h := kafkatest.Headers(letters[""]); h[topics.HeaderErrorStage] != topics.StageDecode {
		t.Errorf("keyless dead letter: got %s=%q, want %s", topics.HeaderErrorStage, h[topics.HeaderErrorStage], topics.StageDecode)
	}
}

// TestKeylessRecordIsDeadLettered: a record without a key written straight
// to the ingest topic goes to the DLQ without touching the state, and its
// partition keeps processing, after a restart too.
func TestKeylessRecordIsDeadLettered(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	keyless := ingestRecord(env, "shop", "k1", `{}`)
	keyless.Key = nil
	wrongKey := ingestRecord(env, "shop", "k2", `{}`)
	wrongKey.Key = []byte("k2")
	produce(t, cl, ingestRecord(env, "shop", "e0", `{}`), keyless, wrongKey, ingestRecord(env, "shop", "e1", `{}`))
	dir := t.TempDir()
	in := start(t, env, options{name: "a", stateDir: dir})

	dlq := waitDLQ(t, env, 2)
	for _, r := range dlq {
		if h := kafkatest.Headers(r); h[topics.HeaderErrorStage] != topics.StageDecode || !strings.Contains(h[topics.HeaderError], "key") {
			t.Errorf("dead letter of key %q: got %s=%q %s=%q, want stage decode and the key's fault", r.Key,
				topics.HeaderErrorStage, h[topics.HeaderErrorStage], topics.HeaderError, h[topics.HeaderError])
		}
	}
	exactlyOnce(t, waitEvents(t, env, 2, 30*time.Second), 2, 1)
	for _, r := range env.Records(t, env.Names.Changelog) {
		// The dead letters' event.dead_lettered events are events too.
		if string(r.Key) != "shop:e0" && string(r.Key) != "shop:e1" && !strings.HasPrefix(string(r.Key), topics.OperationalSource+":") {
			t.Errorf("changelog: got a record of key %q, want only shop:e0, shop:e1 and operational events", r.Key)
		}
	}
	in.stop(t)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	start(t, env, options{name: "a", stateDir: dir})
	produce(t, cl, ingestRecord(env, "shop", "e0", `{}`), ingestRecord(env, "shop", "e2", `{}`))
	exactlyOnce(t, waitEvents(t, env, 3, 30*time.Second), 3, 1)
}

// TestBadChangelogRecordIsSkipped: records in the changelog that are not
// states (no key, a value that does not decode) do not stop a restore: a
// processor rebuilding its store from scratch skips and counts them, and
// still drops duplicates of earlier events. Kafka refuses keyless records
// on a compacted topic (INVALID_RECORD), so those are written on kfake
// only.
func TestBadChangelogRecordIsSkipped(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	produce(t, cl, ingestRecord(env, "shop", "e0", `{}`))
	dir := t.TempDir()
	first := start(t, env, options{name: "a", stateDir: dir})
	waitEvents(t, env, 1, 30*time.Second)
	first.stop(t)

	changelog := string(env.Names.Changelog)
	bad := []*kgo.Record{
		{Topic: changelog, Key: []byte("shop:x"), Value: []byte("garbage")},
		{Topic: changelog, Key: []byte("shop:y"), Value: []byte(`{"status":"exploded"}`)},
	}
	if !kafkatest.Real() {
		bad = append(bad, &kgo.Record{Topic: changelog, Value: []byte(`{"status":"done"}`)}, &kgo.Record{Topic: changelog})
	}
	produce(t, cl, bad...)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	in := start(t, env, options{name: "a", stateDir: dir})
	produce(t, cl, ingestRecord(env, "shop", "e0", `{}`), ingestRecord(env, "shop", "e1", `{}`))
	got := waitEvents(t, env, 2, 30*time.Second)
	exactlyOnce(t, got, 2, 1)
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if n := in.count("duplicate"); n != 1 {
			return fmt.Errorf("duplicates: got %d, want 1 (e0 again)", n)
		}
		return nil
	})
	if n := in.metric("hookstream_processor_changelog_skipped_total", "", ""); n != float64(len(bad)) {
		t.Errorf("changelog records skipped: got %v, want %d", n, len(bad))
	}
}

// TestRecordNoLetterCanHoldIsSkipped: when even a bare dead letter is
// refused (the DLQ takes nothing, not even Kafka's transaction markers),
// the record is skipped and counted as failed rather than blocking its
// partition; the others are processed, without waiting out a transaction
// timeout.
func TestRecordNoLetterCanHoldIsSkipped(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	lowerMaxMessageBytes(t, env, env.Names.Events, 16<<10)
	lowerMaxMessageBytes(t, env, env.Names.DLQ, 64)
	produce(t, env.Client(t), interleaved(env, 5, bigEvent(env, "big"))...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	got := waitEvents(t, env, 10, 30*time.Second)
	exactlyOnce(t, got, 10, 1)
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if n := in.count("failed"); n != 1 {
			return fmt.Errorf("failed: got %d, want 1", n)
		}
		return nil
	})
	if n := in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > 4 {
		t.Errorf("aborted transactions: got %v, want at most 4", n)
	}
	if dlq := env.Records(t, env.Names.DLQ); len(dlq) != 0 {
		t.Errorf("dlq: got %d records, want none", len(dlq))
	}
}

// TestOversizedLetterIsCut: a record written straight to the ingest topic
// as large as the topic takes cannot be processed, and its dead letter,
// with the error headers added, cannot fit either: the letter carries the
// body cut short, and hs-truncated its original size.
func TestOversizedLetterIsCut(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	limit := topics.MaxRecordBytes(maxBody)
	huge := ingestRecord(env, "shop", "huge", "")
	huge.Value = make([]byte, limit-topics.RecordBytes(huge))
	_, _ = rand.NewChaCha8([32]byte{3}).Read(huge.Value)
	cl := env.Client(t, kgo.ProducerBatchMaxBytes(int32(limit)))
	produce(t, cl, interleaved(env, 3, huge)...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	dlq := checkSurvivors(t, env, in, 6, "shop:huge")["shop:huge"]
	h := kafkatest.Headers(dlq)
	if h[topics.HeaderTruncated] != strconv.Itoa(len(huge.Value)) || len(dlq.Value) == 0 || !bytes.HasPrefix(huge.Value, dlq.Value) {
		t.Errorf("dead letter: got %d value bytes, %s=%q; want a prefix of the %d bytes and their size",
			len(dlq.Value), topics.HeaderTruncated, h[topics.HeaderTruncated], len(huge.Value))
	}
	if got := topics.RecordBytes(dlq); got > limit {
		t.Errorf("dead letter: got %d bytes, want at most %d", got, limit)
	}
	if !strings.Contains(h[topics.HeaderError], "exceeds the record limit") || h[topics.HeaderSource] != "shop" {
		t.Errorf("dead letter headers: got %v", h)
	}
}
