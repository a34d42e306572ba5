package events

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Bounds of one page of a search through the admin API.
const (
	// MaxRead is the most offsets a page reads: at most this many records
	// (transaction markers count) are read per request.
	MaxRead = 10_000
	// MaxLimit is the most events a page returns, and its default.
	MaxLimit = 100
	// maxCursor bounds a cursor's length, in bytes, before it is decoded.
	maxCursor = 64 << 10
)

// ErrInvalid is a query that cannot be right: a glob or a time that does
// not parse, a range that ends before it starts, a cursor that is not
// one.
var ErrInvalid = admin.Invalid("events: invalid query")

// invalidf is an error of ErrInvalid with its own message.
func invalidf(format string, args ...any) error {
	return admin.Of(ErrInvalid, fmt.Errorf(format, args...))
}

// ParseTime reads a time as the API and the commands take it: RFC 3339,
// or a positive duration back from now (2h, 30m).
func ParseTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, invalidf("%q is neither an RFC 3339 time nor a positive duration (2h, 30m)", v)
	}
	return now.Add(-d), nil
}

// Query selects events of the events topic.
type Query struct {
	// Source and Type are globs on the event's source and type (empty:
	// all); hookstream's own operational events (source
	// topics.OperationalSource) match like any other.
	Source, Type string
	// Since and Until bound the range by the time records were written
	// (Kafka's offsets by time): zero Since is the log start, zero Until
	// the end as the first page reads it.
	Since, Until time.Time
	// Cursor continues a search where the page that returned it stopped;
	// Since and Until are then the cursor's.
	Cursor string
	// Limit is the most events returned: 1 to MaxLimit through the API;
	// 0 for no limit.
	Limit int
	// MaxRead bounds the offsets read (MaxRead through the API); 0 for no
	// bound.
	MaxRead int64
}

// Check reports what is wrong with q, an ErrInvalid.
func (q Query) Check() error {
	for name, v := range map[string]string{"source": q.Source, "type": q.Type} {
		if _, err := path.Match(v, ""); err != nil {
			return invalidf("%s: invalid glob %q", name, v)
		}
	}
	switch {
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until):
		return invalidf("since must be before until")
	case q.Limit < 0:
		return invalidf("limit: %d is not a positive number", q.Limit)
	case q.MaxRead < 0:
		return invalidf("max read: %d is negative", q.MaxRead)
	case len(q.Cursor) > maxCursor:
		return invalidf("cursor: longer than %d bytes: not a cursor of this search", maxCursor)
	}
	return nil
}

// Result is one event a search found.
type Result struct {
	Key        string    `json:"key"` // <source>:<event-id>
	Source     string    `json:"source"`
	Type       string    `json:"type"`
	ReceivedAt time.Time `json:"received_at"`
	// WrittenAt is when the processor wrote the event's record (the
	// record's timestamp): the order of a search, and the clock its since
	// and until bound.
	WrittenAt time.Time `json:"written_at"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	// Replay counts the event's re-emissions (hs-replay), 0 for a first.
	Replay int `json:"replay,omitempty"`
}

// Page is what one call of Search found.
type Page struct {
	// Events are the matches in the order they were written (their
	// records' timestamps, WrittenAt).
	Events []Result `json:"events"`
	// Cursor continues the search; empty when the range is read to its
	// end.
	Cursor string `json:"cursor,omitempty"`
	// Read is how many offsets the page read; Left how many of the range
	// are left to read.
	Read int64 `json:"read"`
	Left int64 `json:"left"`
}

// Search returns the events of q: a page of at most q.Limit matches found
// within q.MaxRead offsets, and a cursor to read on.
func (s *Service) Search(ctx context.Context, q Query) (Page, error) {
	var out []Result
	page, err := s.Scan(ctx, q, func(r *kgo.Record) error {
		out = append(out, resultOf(r))
		return nil
	}, nil)
	if err != nil {
		return Page{}, err
	}
	page.Events = out
	if page.Events == nil {
		page.Events = []Result{}
	}
	return page, nil
}

// resultOf is what a search shows of an events record.
func resultOf(r *kgo.Record) Result {
	res := Result{Key: string(r.Key), Partition: r.Partition, Offset: r.Offset, ReceivedAt: r.Timestamp.UTC(), WrittenAt: r.Timestamp.UTC()}
	res.Source, res.Type = topics.EventSourceType(r)
	if env, err := topics.ParseEnvelope(r.Value); err == nil {
		res.ReceivedAt, res.Replay = env.ReceivedAt, env.Replay
	}
	return res
}

// Scan reads the events of q, read_committed, all partitions at once,
// and calls fn with the matches in time order (merge.go): at most q.Limit,
// within q.MaxRead offsets, until fn fails. It returns the page without
// its events: the cursor to read on, and the offsets read and left.
// progress, when not nil, is called as topics.ReadRanges calls it.
func (s *Service) Scan(ctx context.Context, q Query, fn func(*kgo.Record) error, progress func(read, total int64)) (Page, error) {
	c := s.c
	if err := q.Check(); err != nil {
		return Page{}, err
	}
	left, err := q.ranges(ctx, c.Client, c.Names.Events)
	if err != nil {
		return Page{}, err
	}
	now := bounded(left, q.MaxRead)
	m := newMerge(left, q.Limit)
	settled := false
	err = c.ReadRanges(ctx, c.Names.Events, now, func(r *kgo.Record) bool {
		if settled {
			return false
		}
		m.add(r, q.matches(r))
		return true
	}, func(read, total int64) {
		settled = m.settled()
		if progress != nil {
			progress(read, total)
		}
	})
	if err != nil {
		return Page{}, err
	}
	if !settled {
		m.readThrough(now)
	}
	found, rest := m.page()
	for _, r := range found {
		if err := fn(r); err != nil {
			return Page{}, err
		}
	}
	page := Page{Read: left.Offsets() - rest.Offsets(), Left: rest.Offsets()}
	if len(rest) > 0 {
		page.Cursor = encodeCursor(rest)
	}
	return page, nil
}

// matches reports whether events record r is one of q's: its source and
// type match q's globs. hookstream's own operational events are events
// like any other here, unlike for a subscription, which receives them
// only when it names their source: an operator searching all sources sees
// them too.
func (q Query) matches(r *kgo.Record) bool {
	source, typ := topics.EventSourceType(r)
	return globMatch(q.Source, source) && globMatch(q.Type, typ)
}

// globMatch reports whether v matches glob g, every v matching an empty
// g.
func globMatch(g, v string) bool {
	ok, _ := path.Match(g, v) // Check refused a bad glob
	return g == "" || ok
}

// ranges are the offsets q selects: its cursor's, within what the topic
// still holds, or those of its times.
func (q Query) ranges(ctx context.Context, cl *kgo.Client, topic topics.Topic) (topics.Ranges, error) {
	if q.Cursor == "" {
		return topics.Span{From: topics.At(q.Since), To: topics.At(q.Until), Stable: true}.Ranges(ctx, cl, topic)
	}
	want, err := decodeCursor(q.Cursor)
	if err != nil {
		return nil, err
	}
	held, err := topics.Span{Stable: true}.Ranges(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	out := make(topics.Ranges, len(want))
	for p, r := range want {
		h, ok := held[p]
		if !ok {
			continue // empty now, or no such partition
		}
		// Retention may have deleted the cursor's next records: read on
		// from the log start.
		r = topics.Range{From: max(r.From, h.From), To: min(r.To, h.To)}
		if r.From < r.To {
			out[p] = r
		}
	}
	return out, nil
}

// bounded is the part of ranges to read within max offsets (0: all): the
// bound is shared evenly, a partition with less left giving its share up
// to the others.
func bounded(ranges topics.Ranges, limit int64) topics.Ranges {
	if limit <= 0 || ranges.Offsets() <= limit {
		return ranges
	}
	ps := make([]int32, 0, len(ranges))
	for p := range ranges {
		ps = append(ps, p)
	}
	// The shortest first, so that what they leave goes to the longer.
	slices.SortFunc(ps, func(a, b int32) int {
		return cmp.Or(cmp.Compare(ranges[a].To-ranges[a].From, ranges[b].To-ranges[b].From), cmp.Compare(a, b))
	})
	out := make(topics.Ranges, len(ranges))
	budget := limit
	for i, p := range ps {
		r := ranges[p]
		share := budget / int64(len(ps)-i)
		if i == len(ps)-1 {
			share = budget
		}
		n := min(r.To-r.From, share)
		out[p] = topics.Range{From: r.From, To: r.From + n}
		budget -= n
	}
	return out
}

// cursor is the wire form of a cursor: the offsets left to read, by
// partition.
type cursor struct {
	V    int                `json:"v"`
	Left map[int32][2]int64 `json:"left"`
}

func encodeCursor(left topics.Ranges) string {
	c := cursor{V: 1, Left: make(map[int32][2]int64, len(left))}
	for p, r := range left {
		c.Left[p] = [2]int64{r.From, r.To}
	}
	b, _ := json.Marshal(c) // numbers only: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (topics.Ranges, error) {
	const bad = "cursor: not a cursor of this search"
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, invalidf("%s", bad)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.V != 1 {
		return nil, invalidf("%s", bad)
	}
	out := make(topics.Ranges, len(c.Left))
	for p, r := range c.Left {
		if p < 0 || r[0] < 0 || r[0] > r[1] {
			return nil, invalidf("%s", bad)
		}
		out[p] = topics.Range{From: r[0], To: r[1]}
	}
	return out, nil
}
