package pull

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// acknowledge commits the cursor cur presents, when it moves the
// committed one, and records the events of the answer it came with that
// it acknowledges for the first time (those after the committed cursor)
// in the attempts topic: the ledger shows them delivered, or failed with
// their transform's error.
func (s *Server) acknowledge(ctx context.Context, sc *compiled, sh *share, committed []int64, cur cursor) error {
	moved := false
	for p := range committed {
		moved = moved || cur.to[p] != committed[p]
	}
	if !moved {
		return nil
	}
	start := s.now()
	if err := s.commit(ctx, sc.sub, cur.to); err != nil {
		return err
	}
	end := s.now()
	from := make([]int64, len(committed))
	var span int64
	for p := range from {
		from[p] = max(committed[p], cur.from[p])
		span += max(cur.to[p]-from[p], 0)
	}
	if span == 0 || span > int64(s.cfg.MaxScan)*2 {
		return nil // nothing newly acknowledged, or not one answer's
	}
	s.noteAcks(ctx, sc, sh, from, cur.to, start, end)
	return nil
}

// noteAcks writes an attempt for each event sc's consumer received in
// [from, to), read again (one answer's records at most, each fetch held
// in sh while its records are read), and exports its acknowledgment
// span: the commit, from start to end. A failure is logged: the cursor
// is committed, and the ledger is a record, not a guarantee.
func (s *Server) noteAcks(ctx context.Context, sc *compiled, sh *share, from, to []int64, start, end time.Time) {
	now := end.UTC()
	pos := slices.Clone(from)
	order := rotation(from)
	wait := backoff.New(10*time.Millisecond, 100*time.Millisecond)
	for rounds := 0; rounds < 100; rounds++ {
		var round []int32
		for _, p := range order {
			if pos[p] < to[p] {
				round = append(round, p)
			}
		}
		if len(round) == 0 {
			return
		}
		var got []fetched
		err := errBudget
		if sh.hold(ctx, fetchCost(s.cfg.MaxAnswerBytes, int(s.cfg.MaxRecordBytes))) {
			got, err = s.fetch.fetch(ctx, round, pos, int32(s.cfg.MaxAnswerBytes))
		}
		if err != nil {
			sh.release()
			s.log.Warn("pull acknowledgments not recorded", "subscription", sc.sub.ID, "err", err)
			return
		}
		progressed := false
		for _, f := range got {
			p := f.partition
			for _, r := range f.recs {
				if r.Offset >= to[p] {
					break
				}
				match, _, terr := judge(sc.render, subscriptions.NewEvent(r), s.cfg.MaxAnswerBytes)
				if match {
					a := topics.Attempt{Subscription: sc.sub.ID, EventID: string(r.Key), N: 1, Outcome: topics.OutcomeDelivered, At: now}
					if terr != nil {
						a.Outcome, a.Error = topics.OutcomeFailed, terr.Error()
					}
					s.note(a)
					s.ackSpan(ctx, r, a, start, end)
				}
			}
			next := min(f.next, to[p])
			progressed = progressed || next > pos[p]
			pos[p] = next
		}
		sh.release()
		order = readLast(order, got)
		if !progressed && !wait.Wait(ctx) {
			return
		}
	}
}

// ackSpan exports the span of the acknowledgment a of events record r,
// from start to end: a child of the context r carries, as a webhook
// attempt's span is, following the messaging conventions for settling a
// message.
func (s *Server) ackSpan(ctx context.Context, r *kgo.Record, a topics.Attempt, start, end time.Time) {
	_, span := s.tracer.Start(s.cfg.Tracing.Extract(ctx, r.Headers), "ack "+r.Topic,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName("ack"),
			semconv.MessagingDestinationName(r.Topic), semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))),
			semconv.MessagingKafkaOffset(int(r.Offset)), semconv.MessagingConsumerGroupName(string(s.cfg.Names.SubscriptionGroup(a.Subscription))),
			tracing.Subscription.String(a.Subscription), tracing.EventID.String(a.EventID), tracing.Outcome.String(a.Outcome))
		if a.Error != "" {
			span.SetStatus(codes.Error, a.Error)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// note writes a to the attempts topic without waiting for it.
func (s *Server) note(a topics.Attempt) {
	s.cl.Produce(context.Background(), a.Record(s.cfg.Names.DeliveryAttempts), func(_ *kgo.Record, err error) {
		if err != nil {
			s.log.Warn("pull acknowledgment not recorded", "subscription", a.Subscription, "event_id", a.EventID, "err", err)
		}
	})
}
