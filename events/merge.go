package events

import (
	"cmp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// A search's time order: the events of every partition merged by the
// time their records were written (the records' timestamps, the clock
// since and until bound), partitions being in that order already, as one
// processor at a time writes each. A page holds the earliest matches of
// what is left of the range: a match is shown only once every partition
// that still has records to read has been read past its time, so that a
// later page cannot bring an earlier event. A partition whose share of a
// page's reads held no record (only transaction markers or aborted
// records) does not hold the others back.

// merge gathers the matches of one page, partition by partition.
type merge struct {
	// left is what the query has left to read, before this page.
	left  topics.Ranges
	limit int
	parts map[int32]*part
}

// part is what a page read of one partition.
type part struct {
	matches []*kgo.Record // in offset order, at most the limit
	next    int64         // the offset after the last record read, or of the first match not kept
	last    time.Time     // the time of the record at next-1, or of the first match not kept
	read    bool          // a record was read
	full    bool          // a match was not kept: the partition is read no further
}

func newMerge(left topics.Ranges, limit int) *merge {
	m := &merge{left: left, limit: limit, parts: make(map[int32]*part, len(left))}
	for p, r := range left {
		m.parts[p] = &part{next: r.From}
	}
	return m
}

// add takes a record read; match says whether it is one of the query's.
func (m *merge) add(r *kgo.Record, match bool) {
	pt := m.parts[r.Partition]
	if pt == nil || pt.full {
		return
	}
	if match && m.limit > 0 && len(pt.matches) == m.limit {
		// No later match of this partition can be on the page.
		pt.full, pt.next, pt.last = true, r.Offset, r.Timestamp
		return
	}
	pt.read, pt.next, pt.last = true, r.Offset+1, r.Timestamp
	if match {
		pt.matches = append(pt.matches, r)
	}
}

// readThrough records that the page read its ranges to their ends: a
// partition not full is read past its last records, transaction markers
// included.
func (m *merge) readThrough(read topics.Ranges) {
	for p, r := range read {
		if pt := m.parts[p]; !pt.full {
			pt.next = max(pt.next, r.To)
		}
	}
}

// horizon is the latest time up to which every match is known: the
// earliest last time of the partitions with records left to read.
func (m *merge) horizon() (h time.Time, bounded bool) {
	for p, pt := range m.parts {
		if !pt.read || pt.next >= m.left[p].To && !pt.full {
			continue
		}
		if !bounded || pt.last.Before(h) {
			h, bounded = pt.last, true
		}
	}
	return h, bounded
}

// settled reports whether the page is known as the reads stand: the
// limit's worth of matches are up to the horizon.
func (m *merge) settled() bool {
	if m.limit == 0 {
		return false
	}
	kept := 0
	for _, pt := range m.parts {
		kept += len(pt.matches)
	}
	if kept < m.limit {
		return false
	}
	h, bounded := m.horizon()
	n := 0
	for _, pt := range m.parts {
		for _, r := range pt.matches {
			if bounded && r.Timestamp.After(h) {
				break
			}
			n++
		}
	}
	return n >= m.limit
}

// page is the matches of the page in time order, and what is left of
// the range after them: in each partition, from its first match not on
// the page, or else from where its reads ended.
func (m *merge) page() ([]*kgo.Record, topics.Ranges) {
	h, bounded := m.horizon()
	known := make(map[int32]int, len(m.parts)) // partition -> its matches up to the horizon
	for p, pt := range m.parts {
		n := 0
		for n < len(pt.matches) && !(bounded && pt.matches[n].Timestamp.After(h)) {
			n++
		}
		known[p] = n
	}
	taken := make(map[int32]int, len(m.parts))
	var out []*kgo.Record
	for m.limit == 0 || len(out) < m.limit {
		var first *kgo.Record
		for p, pt := range m.parts {
			if i := taken[p]; i < known[p] && (first == nil || earlier(pt.matches[i], first)) {
				first = pt.matches[i]
			}
		}
		if first == nil {
			break
		}
		out = append(out, first)
		taken[first.Partition]++
	}
	left := make(topics.Ranges, len(m.left))
	for p, r := range m.left {
		pt := m.parts[p]
		from := pt.next
		if i := taken[p]; i < len(pt.matches) {
			from = pt.matches[i].Offset
		}
		if from < r.To {
			left[p] = topics.Range{From: from, To: r.To}
		}
	}
	return out, left
}

// earlier orders records by time, then partition.
func earlier(a, b *kgo.Record) bool {
	return cmp.Or(a.Timestamp.Compare(b.Timestamp), cmp.Compare(a.Partition, b.Partition)) < 0
}
