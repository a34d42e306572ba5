package topics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// noise returns n incompressible bytes.
func noise(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
	return b
}

// padTo grows r's value until RecordBytes(r) is exactly size.
func padTo(r *kgo.Record, size int64) *kgo.Record {
	r.Value = append(r.Value, noise(int(size-topics.RecordBytes(r)))...)
	return r
}

// TestRecordBytesFitsTheProducer proves RecordFraming sufficient: a
// record of RecordBytes == limit is accepted by a producer whose batches
// are limited to limit bytes, on a topic whose max.message.bytes is limit,
// whatever its shape and compression; a record over the limit on the wire
// is refused, so the limit is really enforced.
func TestRecordBytesFitsTheProducer(t *testing.T) {
	const maxBody = 64 << 10
	limit := topics.MaxRecordBytes(maxBody)
	env := kafkatest.New(t, 1, maxBody)
	topic := string(env.Names.Ingest)
	manyHeaders := make([]kgo.RecordHeader, 2000)
	for i := range manyHeaders {
		manyHeaders[i] = kgo.RecordHeader{Key: "h" + strconv.Itoa(i)}
	}
	shapes := []struct {
		name string
		r    *kgo.Record
	}{
		{"value only", &kgo.Record{}},
		{"key and headers", &kgo.Record{Key: noise(1000), Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: noise(5000)}}}},
		{"many empty headers", &kgo.Record{Headers: manyHeaders}},
		{"big key", &kgo.Record{Key: noise(int(limit / 2))}},
	}
	compressions := []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"snappy", kgo.SnappyCompression()}, {"zstd", kgo.ZstdCompression()}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range compressions {
		cl := env.Client(t, kgo.ProducerBatchMaxBytes(int32(limit)), kgo.ProducerBatchCompression(c.codec), kgo.RecordRetries(2))
		for _, s := range shapes {
			t.Run(c.name+"/"+s.name, func(t *testing.T) {
				r := padTo(&kgo.Record{Topic: topic, Key: s.r.Key, Headers: s.r.Headers}, limit)
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Errorf("record of RecordBytes %d == limit: got %v, want it accepted", topics.RecordBytes(r), err)
				}
			})
		}
		t.Run(c.name+"/over the limit", func(t *testing.T) {
			r := &kgo.Record{Topic: topic, Value: noise(int(limit))}
			if err := cl.ProduceSync(ctx, r).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("record of %d value bytes: got %v, want MESSAGE_TOO_LARGE", len(r.Value), err)
			}
		})
	}
}

// TestFitCutsToTheLimit: a record one byte past the limit is cut to fit
// and then accepted by the producer; Fit keeps what a dead letter needs.
func TestFitCutsToTheLimit(t *testing.T) {
	const limit = 64 << 10
	own := []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte("shop")},
		{Key: topics.HeaderError, Value: bytes.Repeat([]byte("e"), 1000)},
	}
	var provider []kgo.RecordHeader
	for i := range 5000 {
		provider = append(provider, kgo.RecordHeader{Key: fmt.Sprintf("%sx-%d", topics.HeaderProviderPrefix, i), Value: []byte("v")})
	}
	var repeated []kgo.RecordHeader
	for range 1000 {
		repeated = append(repeated, kgo.RecordHeader{Key: topics.HeaderEventType, Value: bytes.Repeat([]byte("t"), 100)})
	}
	tests := []struct {
		name      string
		r         *kgo.Record
		wantValue bool // some of the value is kept
		wantError int  // bytes of hs-error kept
	}{
		{"one byte past", padTo(&kgo.Record{Key: []byte("shop:1"), Headers: own}, limit+1), true, 1000},
		{"headers alone overflow", &kgo.Record{Key: []byte("shop:1"), Value: []byte("body"), Headers: append(append([]kgo.RecordHeader{}, own...), provider...)}, false, 1000},
		{"own headers overflow", &kgo.Record{Key: []byte("shop:1"), Value: []byte("body"), Headers: append(append([]kgo.RecordHeader{}, own...), repeated...)}, false, 256},
		{"key overflows", &kgo.Record{Key: noise(2 * limit), Value: []byte("body"), Headers: own}, false, 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.r.Value)
			if !topics.Fit(tt.r, limit) {
				t.Fatalf("Fit of a record of %d bytes: got false, want true", topics.RecordBytes(tt.r))
			}
			if got := topics.RecordBytes(tt.r); got > limit {
				t.Errorf("RecordBytes after Fit: got %d, want <= %d", got, limit)
			}
			h := map[string]string{}
			for _, hd := range tt.r.Headers {
				h[hd.Key] = string(hd.Value)
			}
			if h[topics.HeaderTruncated] != strconv.Itoa(before) || h[topics.HeaderSource] != "shop" || len(h[topics.HeaderError]) != tt.wantError {
				t.Errorf("headers after Fit: got %s=%q, %s=%q, %d bytes of %s; want %d, shop, %d bytes",
					topics.HeaderTruncated, h[topics.HeaderTruncated], topics.HeaderSource, h[topics.HeaderSource],
					len(h[topics.HeaderError]), topics.HeaderError, before, tt.wantError)
			}
			if got := len(tt.r.Value) > 0; got != tt.wantValue {
				t.Errorf("value kept after Fit: got %d bytes, want some: %v", len(tt.r.Value), tt.wantValue)
			}
		})
	}
	small := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: own}
	if topics.Fit(small, limit) || len(small.Headers) != len(own) {
		t.Errorf("Fit of a record within the limit changed it: %+v", small)
	}
}

func TestIsPermanentProduceErr(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), true},
		{kerr.InvalidRecord, true},
		{kerr.CorruptMessage, true},
		{kerr.RecordListTooLarge, true},
		{kerr.InvalidTimestamp, true},
		{kerr.InvalidTopicException, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.NotLeaderForPartition, false},
		{kgo.ErrRecordTimeout, false},
		{context.Canceled, false},
	}
	for _, tt := range tests {
		if got := topics.IsPermanentProduceErr(tt.err); got != tt.want {
			t.Errorf("IsPermanentProduceErr(%v): got %v, want %v", tt.err, got, tt.want)
		}
	}
}

// FuzzFit: for any record and any limit of 8 KiB or more, Fit never
// panics, meets the limit, and reports a cut exactly when the record was
// over it.
func FuzzFit(f *testing.F) {
	f.Add([]byte("k"), 100, 3, 10, 9000)
	f.Add([]byte(nil), 1<<20, 0, 0, 8192)
	f.Add(make([]byte, 1<<15), 5000, 2000, 300, 10000)
	f.Fuzz(func(t *testing.T, key []byte, valueLen, headers, headerLen, limit int) {
		if valueLen < 0 || valueLen > 1<<21 || headers < 0 || headers > 5000 || headerLen < 0 || headerLen > 1<<12 || limit < 8<<10 {
			return
		}
		r := &kgo.Record{Key: key, Value: make([]byte, valueLen)}
		for i := range headers {
			k := topics.HeaderProviderPrefix + strconv.Itoa(i)
			if i%3 == 0 {
				k = topics.HeaderError // one of hookstream's own, repeated
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: make([]byte, headerLen)})
		}
		over := topics.RecordBytes(r) > int64(limit)
		if cut := topics.Fit(r, int64(limit)); cut != over {
			t.Errorf("Fit: got %v, want %v", cut, over)
		}
		if n := topics.RecordBytes(r); n > int64(limit) {
			t.Errorf("RecordBytes after Fit: got %d, want <= %d", n, limit)
		}
	})
}
