package ingest

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// What an envelope can make of the strings it copies, at worst.
const (
	// envelopeFields bounds what an envelope adds of its own: field
	// names, quotes, braces and two timestamps.
	envelopeFields = 256
	// fieldQuoting bounds the quotes, colon and comma of a copied header.
	fieldQuoting = 8
	// jsonEscapeGrowth: JSON escaping turns one byte into at most six
	// (\u003c, or \ufffd for an invalid UTF-8 byte).
	jsonEscapeGrowth = 6
	// formGrowth: a form's decoding, every field escaped at worst with its
	// quotes and separators, takes at most seven bytes per body byte.
	formGrowth = 7
)

// eventFits refuses, with 413, a request whose events record could never
// be written: a 202 promises the event can be processed. The envelope is
// built only when a cheap upper bound says the record might not fit, so
// typical bodies pay nothing. receivedAt stands in for the processor's
// processed_at; the bytes they can differ by are within the framing
// allowance of topics.RecordBytes. The record counts the largest replay
// mark, so the event can also be emitted again.
func (h *Handler) eventFits(rec *kgo.Record, isJSON bool, receivedAt time.Time) error {
	limit := topics.MaxRecordBytes(h.cfg.MaxBody)
	if eventBytesBound(rec, isJSON) <= limit {
		return nil
	}
	env, err := topics.NewEnvelope(rec, receivedAt)
	if err != nil {
		return fmt.Errorf("ingest: envelope of %s: %w", rec.Key, err)
	}
	env.Replay = math.MaxInt32 // a replay's marks must fit too
	// The topic's name is no part of a record's size.
	ev, err := topics.EventRecord("", rec, env)
	if err != nil {
		return fmt.Errorf("ingest: events record of %s: %w", rec.Key, err)
	}
	if n := topics.RecordBytes(ev); n > limit {
		return &apiError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("payload too large: its event would take %d bytes, over the record limit of %d bytes (non-JSON bodies are stored base64-encoded, form bodies also decoded)", n, limit)}
	}
	return nil
}

// eventBytesBound is an upper bound of topics.RecordBytes of the events
// record built from the ingest record rec, in one pass over its headers:
// the record itself (key, headers, and a JSON body, which the envelope
// copies verbatim), the key and every header escaped at worst into the
// envelope, and for a non-JSON body its base64 encoding and, should it be
// a form, its decoding.
func eventBytesBound(rec *kgo.Record, isJSON bool) int64 {
	n := topics.RecordBytes(rec) + envelopeFields + jsonEscapeGrowth*int64(len(rec.Key))
	for _, hd := range rec.Headers {
		n += jsonEscapeGrowth*int64(len(hd.Key)+len(hd.Value)) + fieldQuoting
	}
	if !isJSON {
		body := int64(len(rec.Value))
		n += body/3 + 4          // base64, beyond the body counted once
		n += formGrowth*body + 2 // the form object
	}
	return n
}
