package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Query selects records of the trail.
type Query struct {
	// Cursor is where to read on: a Page's Cursor; "" starts at Since, or
	// at the oldest record kept.
	Cursor string
	// Since skips records before it; zero: none.
	Since time.Time
	// Actor is a token's id or name; "": anyone.
	Actor string
	// Action is a glob of actions (subscription.*); "": every action.
	Action string
	// Target is a target, exactly; "": every target.
	Target string
	// Limit bounds the records of a page (1 to MaxLimit).
	Limit int
}

// Bounds of a read.
const (
	// MaxLimit bounds the records of a page.
	MaxLimit = 1000
	// MaxRead bounds the offsets one page reads, matching or not: a page
	// may hold fewer than its limit and a cursor that reads on.
	MaxRead = 10_000
)

// Page is what one read of the trail found, oldest first, and the cursor
// to read on from: a page without records has reached the end of the
// trail as it was; asking again with its cursor follows the trail.
type Page struct {
	Records []admin.Record `json:"records"`
	Cursor  string         `json:"cursor"`
}

// auditPartition is the trail's one partition.
const auditPartition = 0

// List reads one page of the records q selects.
func (s *Service) List(ctx context.Context, q Query) (Page, error) {
	if _, err := path.Match(q.Action, ""); err != nil {
		return Page{}, fmt.Errorf("%w: action: %q is not a glob", errInvalid, q.Action)
	}
	from, err := s.from(ctx, q)
	if err != nil {
		return Page{}, err
	}
	topic := s.c.Names.Audit
	rs, err := topics.Span{From: topics.Offset(from), First: MaxRead, Partitions: []int32{auditPartition}}.Ranges(ctx, s.c.Client, topic)
	if err != nil {
		return Page{}, fmt.Errorf("audit: %w", err)
	}
	page := Page{Records: []admin.Record{}, Cursor: strconv.FormatInt(max(from, rs[auditPartition].To), 10)}
	err = s.c.ReadRanges(ctx, topic, rs, func(r *kgo.Record) bool {
		var rec admin.Record
		if json.Unmarshal(r.Value, &rec) == nil && q.matches(rec) {
			page.Records = append(page.Records, rec)
		}
		if len(page.Records) < q.Limit {
			return true
		}
		page.Cursor = strconv.FormatInt(r.Offset+1, 10)
		return false
	}, nil)
	if err != nil {
		return Page{}, fmt.Errorf("audit: %w", err)
	}
	return page, nil
}

// errInvalid is answered 400.
var errInvalid = admin.Invalid("invalid audit query")

// from is the offset q starts at: its cursor, else the first record at or
// after Since, else the trail's start.
func (s *Service) from(ctx context.Context, q Query) (int64, error) {
	if q.Cursor != "" {
		o, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || o < 0 {
			return 0, fmt.Errorf("%w: cursor: %q is not a cursor an earlier page gave", errInvalid, q.Cursor)
		}
		return o, nil
	}
	if q.Since.IsZero() {
		return 0, nil
	}
	rs, err := topics.Span{From: topics.At(q.Since), Partitions: []int32{auditPartition}}.Ranges(ctx, s.c.Client, s.c.Names.Audit)
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	r, ok := rs[auditPartition]
	if !ok { // nothing since: the end
		ends, err := s.c.Admin().ListEndOffsets(ctx, string(s.c.Names.Audit))
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return 0, fmt.Errorf("audit: end offsets: %w", err)
		}
		end, _ := ends.Lookup(string(s.c.Names.Audit), auditPartition)
		return end.Offset, nil
	}
	return r.From, nil
}

// matches reports whether q selects rec.
func (q Query) matches(rec admin.Record) bool {
	switch {
	case !q.Since.IsZero() && rec.At.Before(q.Since):
		return false
	case q.Actor != "" && q.Actor != rec.Actor.TokenID && q.Actor != rec.Actor.Name:
		return false
	case q.Target != "" && q.Target != rec.Target:
		return false
	case q.Action != "":
		ok, _ := path.Match(q.Action, rec.Action)
		return ok
	}
	return true
}
