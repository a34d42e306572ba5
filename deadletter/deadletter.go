// Package deadletter owns reading and redriving hookstream's two dead-letter
// queues: <prefix>.dlq, where the processor puts ingest records it could not
// process, and <prefix>.delivery-dlq, where the dispatcher puts deliveries
// that exhausted their attempts.
//
// List and Show read a DLQ as operators see it. Redrive copies letters back
// into the pipeline: processor letters to <prefix>.ingest with their
// original key, value and ingest headers, delivery letters to
// <prefix>.delivery-retry due now with their attempts reset, each copy
// marked hs-redriven-from = "<dlq topic>/<partition>/<offset>". The
// Service does both, for the admin API (Mount: /api/dlq,
// /api/dlq/redrive), the console and hookstream dlq.
//
// # Idempotency
//
// Running the same redrive twice must not double anything downstream. The
// processor would drop a second copy of an event it processed, but the
// dispatcher would deliver a second copy again, so Redrive remembers what
// it redrove, in the DLQ itself: with each copy it writes a marker record
// to the letter's own DLQ partition (key: the letter's key, no value,
// header hs-redriven-from naming the letter; a marker has no
// hs-error-stage, which every letter has). Copies and markers are written
// in one Kafka transaction, so a letter is either copied and marked or
// neither. Reading a DLQ folds the markers into Letter.Redriven, and
// Redrive skips letters already marked.
//
// The marker lives beside its letter and after it, so it is read with the
// letter (a reader starting at a letter reaches its marker) and expires no
// earlier than the letter under the topic's time retention: a letter
// cannot outlive the memory of its redrive. Concurrent redrives of one
// kind share the transactional id <prefix>-redrive-<kind>: a redrive first
// fences every earlier one (which can then commit nothing more) and only
// then reads the markers, so two operators redriving the same letters at
// once copy each letter once. Consumers of the copies must read with
// isolation level read_committed to see an aborted redrive's copies never.
//
// The package refuses to judge or edit letters: a redrive copies a letter
// exactly as it failed, so the cause must be fixed first (a letter that
// fails again comes back as a new letter). It never deletes letters (the
// DLQs are append-only; retention removes them) and never processes or
// delivers anything itself: the processor and the dispatcher's retry
// consumer do, as for any other record.
package deadletter

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// Kind names one of the two DLQs.
type Kind string

const (
	// Processor is <prefix>.dlq: ingest records the processor could not process.
	Processor Kind = "processor"
	// Delivery is <prefix>.delivery-dlq: deliveries that exhausted their attempts.
	Delivery Kind = "delivery"
)

// ParseKind returns the Kind named s.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case Processor, Delivery:
		return k, nil
	}
	return "", fmt.Errorf("unknown dead-letter queue %q (want processor or delivery)", s)
}

// Topic is the DLQ topic of k.
func (k Kind) Topic(n topics.Names) topics.Topic {
	if k == Delivery {
		return n.DeliveryDLQ
	}
	return n.DLQ
}

// Target is the topic a redrive of k copies letters to.
func (k Kind) Target(n topics.Names) topics.Topic {
	if k == Delivery {
		return n.DeliveryRetry
	}
	return n.Ingest
}

// ErrNotFound is returned by Show when no dead letter is at the offset.
var ErrNotFound = errors.New("no dead letter at this offset")

// Letter is one dead letter as operators see it.
type Letter struct {
	Kind      Kind   `json:"kind"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	// Stage is hs-error-stage: decode, validate, process, deliver or transform.
	Stage string `json:"stage"`
	// Error is hs-error, why it failed.
	Error string `json:"error"`
	// FailedAt is hs-failed-at, or the record's timestamp without one.
	FailedAt time.Time `json:"failed_at"`
	// Subscription, Attempts and LastStatus are set on delivery letters.
	Subscription string `json:"subscription,omitempty"`
	Attempts     int    `json:"attempts,omitempty"`
	LastStatus   int    `json:"last_status,omitempty"`
	// Headers are every header of the letter, the error headers included.
	Headers map[string]string `json:"headers"`
	// Value is the original record's value: a raw webhook body for
	// processor letters, an envelope for delivery letters.
	Value []byte `json:"value,omitempty"`
	// Redriven says a redrive already copied this letter back.
	Redriven bool `json:"redriven"`
}

// Redacted is the letter as a viewer reads it: without its value, its
// headers (a provider's among them) and its error, which may quote a
// payload or a subscriber's answer.
func (l Letter) Redacted() Letter {
	l.Value, l.Headers, l.Error = nil, nil, ""
	return l
}

// Filter selects letters. Its zero value selects every letter.
type Filter struct {
	// Since keeps letters that failed at or after it.
	Since time.Time
	// Key keeps letters with this key, or, ending in '*', with this prefix
	// ("github:*", "sub_abc:*").
	Key string
	// Partition keeps letters of one DLQ partition.
	Partition *int32
	// From and Until keep letters at offsets in [From, Until) of each
	// partition read; Until 0 leaves the range open.
	From, Until int64
	// Limit keeps the newest Limit letters of the selection; 0 keeps all.
	Limit int
	// Team keeps the delivery letters of that team's subscriptions only,
	// and no processor letter: what a team token may read (Service.Teams).
	Team string
	// Within, when not nil, keeps only letters at these offsets, by
	// partition (other partitions are not read): the offsets a listing
	// read, so that a redrive copies the letters it showed and none
	// written since. Each partition is read from its range's start to the
	// DLQ's end, so the redrive markers that follow its letters are seen;
	// when that end is more than MaxPastWithin offsets past the range's,
	// List and Redrive read nothing and return ErrChanged.
	Within topics.Ranges

	// teams are the subscriptions of Team (scoped).
	teams map[string]bool
}

// MaxPastWithin is how far past a Filter.Within range a partition's end
// may be for the range to be read: a listing's letters and the markers
// written after them, not however much the DLQ grew since.
const MaxPastWithin = 1_000

// ErrChanged is returned for a Filter.Within whose ranges the DLQ's end
// has left more than MaxPastWithin offsets behind.
var ErrChanged = errors.New("the dead letters changed: preview again")

func (f Filter) match(l *Letter) bool {
	if f.Team != "" && !f.teams[l.Subscription] {
		return false
	}
	if !f.Since.IsZero() && l.FailedAt.Before(f.Since) {
		return false
	}
	if f.Key != "" {
		if prefix, ok := strings.CutSuffix(f.Key, "*"); ok {
			if !strings.HasPrefix(l.Key, prefix) {
				return false
			}
		} else if l.Key != f.Key {
			return false
		}
	}
	if f.Within != nil {
		r, ok := f.Within[l.Partition]
		if !ok || l.Offset < r.From || l.Offset >= r.To {
			return false
		}
	}
	return l.Offset >= f.From && (f.Until <= 0 || l.Offset < f.Until)
}

// Service reads and redrives the dead-letter queues of a cluster.
type Service struct {
	c topics.Cluster
	// registry tells a team's subscriptions (Teams); nil: none.
	registry *subscriptions.Registry
}

// Teams lets the service select a team's letters (Filter.Team), registry
// telling which subscriptions are the team's. Call it before Mount:
// without it a team's selection fails.
func (s *Service) Teams(registry *subscriptions.Registry) { s.registry = registry }

// scoped is f with the subscriptions of its team, if it names one.
func (s *Service) scoped(ctx context.Context, f Filter) (Filter, error) {
	if f.Team == "" {
		return f, nil
	}
	if s.registry == nil {
		return f, errors.New("deadletter: this service cannot tell a team's subscriptions: give it the registry (Service.Teams)")
	}
	subs, err := s.registry.List(ctx)
	if err != nil {
		return f, fmt.Errorf("deadletter: subscriptions of team %s: %w", f.Team, err)
	}
	f.teams = make(map[string]bool)
	for id, sub := range subs {
		if sub.Team == f.Team {
			f.teams[id] = true
		}
	}
	return f, nil
}

// New is the service of c's dead-letter queues. It does no I/O.
func New(c topics.Cluster) *Service { return &Service{c: c} }

// List reads the DLQ of kind from its start to its current end and returns
// the letters f selects, oldest first. It holds at most f.Limit letters at
// any time (the newest read so far); only without a limit does it hold
// every letter selected. The cluster's shared client answers metadata
// queries; the reading client is a client of its own, closed before List
// returns.
func (s *Service) List(ctx context.Context, kind Kind, f Filter) ([]Letter, error) {
	if _, err := ParseKind(string(kind)); err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	f, err := s.scoped(ctx, f)
	if err != nil {
		return nil, err
	}
	sel := newSelection(f.Limit)
	if err := scan(ctx, s.c, kind.Topic(s.c.Names), kind, f, sel.add, sel.mark); err != nil {
		return nil, err
	}
	return sel.sorted(), nil
}

// selection keeps the letters a Filter selects as a DLQ is read: with a
// limit, only the newest limit letters read so far, the others dropped as
// soon as newer ones come.
type selection struct {
	limit int
	held  letterHeap // the oldest first when limited
	at    map[position]*Letter
}

type position struct {
	partition int32
	offset    int64
}

func newSelection(limit int) *selection {
	return &selection{limit: limit, at: make(map[position]*Letter)}
}

// add keeps l, dropping the oldest letter held when over the limit.
func (s *selection) add(l Letter) {
	heap.Push(&s.held, &l)
	s.at[position{l.Partition, l.Offset}] = &l
	if s.limit > 0 && s.held.Len() > s.limit {
		old := heap.Pop(&s.held).(*Letter)
		delete(s.at, position{old.Partition, old.Offset})
	}
}

// mark notes that the letter at partition and offset was redriven. A
// marker follows its letter, so the letter was added before, and is held
// unless newer ones displaced it.
func (s *selection) mark(partition int32, offset int64) {
	if l := s.at[position{partition, offset}]; l != nil {
		l.Redriven = true
	}
}

// sorted returns the letters held, oldest first.
func (s *selection) sorted() []Letter {
	out := make([]Letter, 0, s.held.Len())
	for _, l := range s.held {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Letter) int { return older(&a, &b) })
	return out
}

// older orders letters by failure time, then by partition and offset.
func older(a, b *Letter) int {
	return cmp.Or(a.FailedAt.Compare(b.FailedAt), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
}

type letterHeap []*Letter

func (h letterHeap) Len() int           { return len(h) }
func (h letterHeap) Less(i, j int) bool { return older(h[i], h[j]) < 0 }
func (h letterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *letterHeap) Push(x any)        { *h = append(*h, x.(*Letter)) }
func (h *letterHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}

// Show returns the letter at partition and offset of the DLQ of kind, or an
// error wrapping ErrNotFound.
func (s *Service) Show(ctx context.Context, kind Kind, partition int32, offset int64) (Letter, error) {
	letters, err := s.List(ctx, kind, Filter{Partition: &partition, From: offset, Until: offset + 1})
	if err != nil {
		return Letter{}, err
	}
	if len(letters) == 0 {
		return Letter{}, fmt.Errorf("deadletter: %s partition %d offset %d: %w", kind.Topic(s.c.Names), partition, offset, ErrNotFound)
	}
	return letters[0], nil
}

// scan reads topic (read_committed) from each selected partition's start,
// or f.From, to its current end, calling each with every letter f
// selects (its value copied out of the fetch buffer, which it would
// otherwise keep whole) and mark with every redrive marker's letter, in
// offset order per partition. Markers always follow their letters, so
// starting at f.From misses none that matter. f.Limit is the caller's.
func scan(ctx context.Context, c topics.Cluster, topic topics.Topic, kind Kind, f Filter, each func(Letter), mark func(partition int32, offset int64)) error {
	span := topics.Span{From: topics.Offset(f.From)}
	if f.Partition != nil {
		span.Partitions = []int32{*f.Partition}
	}
	if f.Within != nil {
		span.Partitions = slices.Sorted(maps.Keys(f.Within))
		if f.Partition != nil {
			span.Partitions = slices.DeleteFunc(span.Partitions, func(p int32) bool { return p != *f.Partition })
		}
	}
	ranges, err := span.Ranges(ctx, c.Client, topic)
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("deadletter: topic %s does not exist", topic)
	case err != nil:
		return fmt.Errorf("deadletter: %w", err) // a *topics.NoPartitionError among others
	}
	for p, r := range ranges {
		if w, ok := f.Within[p]; ok {
			r.From = max(r.From, w.From)
			ranges[p] = r
			if r.From >= w.To {
				delete(ranges, p) // no letter of it is selected
				continue
			}
			if r.To-w.To > MaxPastWithin {
				return fmt.Errorf("deadletter: %s partition %d ends %d offsets past %d, more than %d: %w",
					topic, p, r.To-w.To, w.To, MaxPastWithin, ErrChanged)
			}
		}
		if f.Until > 0 && r.From >= f.Until {
			delete(ranges, p) // no letter of it is selected
		}
	}
	err = c.ReadRanges(ctx, topic, ranges, func(r *kgo.Record) bool {
		if p, o, ok := markerOf(r, topic); ok {
			mark(p, o)
			return true
		}
		if l := letterOf(r, kind); f.match(&l) {
			l.Value = bytes.Clone(l.Value)
			each(l)
		}
		return true
	}, nil)
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	return nil
}

// letterOf reads a DLQ record.
func letterOf(r *kgo.Record, kind Kind) Letter {
	dl := topics.ParseDeadLetter(r)
	l := Letter{
		Kind:         kind,
		Partition:    r.Partition,
		Offset:       r.Offset,
		Key:          string(r.Key),
		Stage:        dl.Stage,
		Error:        dl.Error,
		FailedAt:     dl.FailedAt,
		Subscription: dl.Subscription,
		Attempts:     dl.Attempts, // unreadable: shown as 0, kept in Headers
		LastStatus:   dl.LastStatus,
		Headers:      make(map[string]string, len(r.Headers)),
		Value:        r.Value,
	}
	for _, h := range r.Headers {
		l.Headers[h.Key] = string(h.Value)
	}
	return l
}

// ref is the hs-redriven-from value naming a letter.
func ref(topic topics.Topic, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// parseRef is the inverse of ref.
func parseRef(s string) (topic topics.Topic, partition int32, offset int64, ok bool) {
	rest, o, ok := cutLast(s)
	if !ok {
		return "", 0, 0, false
	}
	t, p, ok := cutLast(rest)
	if !ok || t == "" {
		return "", 0, 0, false
	}
	pn, err := strconv.ParseInt(p, 10, 32)
	if err != nil || pn < 0 || strconv.FormatInt(pn, 10) != p {
		return "", 0, 0, false
	}
	on, err := strconv.ParseInt(o, 10, 64)
	if err != nil || on < 0 || strconv.FormatInt(on, 10) != o {
		return "", 0, 0, false
	}
	return topics.Topic(t), int32(pn), on, true
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// markerOf reports whether r is a redrive marker of a letter of topic, and
// which. Letters carry hs-error-stage; a letter that failed again after a
// redrive also carries hs-redriven-from, so that alone marks nothing.
func markerOf(r *kgo.Record, topic topics.Topic) (partition int32, offset int64, ok bool) {
	var from string
	for _, h := range r.Headers {
		switch h.Key {
		case topics.HeaderErrorStage:
			return 0, 0, false
		case topics.HeaderRedrivenFrom:
			from = string(h.Value)
		}
	}
	t, p, o, ok := parseRef(from)
	if !ok || t != topic {
		return 0, 0, false
	}
	return p, o, true
}
