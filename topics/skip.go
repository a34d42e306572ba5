package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Skipper applies the records of a compacted topic of hookstream's own
// (the subscriptions topic, the access topic) and skips each one that
// does not decode: any client with produce rights
// on the topic can write one, and it must stop no reader. A skipped record
// is counted in hookstream_registry_records_skipped_total{topic} and
// logged the first time the skipper meets it, however often the topic is
// read again (each List reads it from the start, and so does each Watch).
type Skipper struct {
	log     *slog.Logger
	skipped *prometheus.CounterVec

	mu sync.Mutex
	// met is, per partition, the offset after the last record met: every
	// reader reads a partition from its start, in order, so a record
	// below it was met before.
	met map[partition]int64
	// refused are the ids of records refused after decoding (their sealed
	// secrets do not open), each logged and counted once; at most
	// maxRefused are remembered, then the set starts again.
	refused map[string]bool
}

// maxRefused bounds the ids a skipper remembers as refused.
const maxRefused = 10_000

type partition struct {
	topic string
	id    int32
}

// NewSkipper builds a skipper that logs on log. It does no I/O.
func NewSkipper(log *slog.Logger) *Skipper {
	return &Skipper{
		log: log,
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_registry_records_skipped_total",
			Help: "Records of hookstream's compacted topics (subscriptions, access) skipped because they do not decode, each counted once.",
		}, []string{"topic"}),
		met:     make(map[partition]int64),
		refused: make(map[string]bool),
	}
}

// MustRegister registers the skipper's counter on reg, or adopts the one
// another skipper registered there: every skipper of a process counts in
// one hookstream_registry_records_skipped_total. Call it before using s.
func (s *Skipper) MustRegister(reg prometheus.Registerer) {
	err := reg.Register(s.skipped)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			s.skipped, err = existing, nil
		}
	}
	if err != nil {
		panic(err) // as prometheus.MustRegister does
	}
}

// Count starts the count of topic at zero, so that it is exported before
// any record is skipped.
func (s *Skipper) Count(topic Topic) { s.skipped.WithLabelValues(string(topic)) }

// Refuse skips the record of id on topic, which decoded but cannot be
// used: logged and counted the first time.
func (s *Skipper) Refuse(topic, id string, err error) {
	s.mu.Lock()
	first := !s.refused[id]
	if first {
		if len(s.refused) >= maxRefused {
			clear(s.refused)
		}
		s.refused[id] = true
	}
	s.mu.Unlock()
	if first {
		s.skipped.WithLabelValues(topic).Inc()
		s.log.Warn("record cannot be used; skipped", "topic", topic, "key", fmt.Sprintf("%.64s", id), "err", fmt.Sprintf("%.256s", err))
	}
}

// Apply applies rec with fn, but a transaction marker, and reports
// whether fn took it. A record fn refuses is skipped.
func (s *Skipper) Apply(rec *kgo.Record, fn func(*kgo.Record) error) bool {
	if rec.Attrs.IsControl() {
		return false
	}
	err := fn(rec)
	p := partition{rec.Topic, rec.Partition}
	s.mu.Lock()
	first := rec.Offset >= s.met[p]
	if first {
		s.met[p] = rec.Offset + 1
	}
	s.mu.Unlock()
	if err != nil && first {
		s.skipped.WithLabelValues(rec.Topic).Inc()
		// Bounded: the key and what the decoder quotes are the writer's.
		s.log.Warn("record does not decode; skipped", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
			"key", fmt.Sprintf("%.64s", rec.Key), "err", fmt.Sprintf("%.256s", err))
	}
	return err == nil
}
