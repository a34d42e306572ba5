package pull

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/subscriptions"
)

// maxRounds bounds the fetches of one answer.
const maxRounds = 64

// read reads the events after pos for sub: at most req.limit, about
// MaxAnswerBytes (at least one event), MaxScan records; with none yet
// and req.wait, it waits for more until the wait ends. What it reads is
// held in sh.
func (s *Server) read(ctx context.Context, sc *compiled, sh *share, pos []int64, req request) (*answer, error) {
	deadline := s.now().Add(req.wait)
	for {
		a, more, err := s.scan(ctx, sc, sh, pos, req.limit)
		if err != nil {
			return nil, err
		}
		if len(a.bodies) > 0 || len(a.errs) > 0 || more || !s.now().Before(deadline) {
			return a, nil
		}
		pos = a.to
		if !s.ends.wait(ctx, pos, deadline, s.metrics.waiting) {
			return a, nil
		}
	}
}

// scan reads from pos once, one leader's partitions a fetch, each fetch
// held in sh until its records are taken, the answer's events after: it
// returns the answer, and whether records remained to be read when it
// stopped (limit, size, MaxScan, or no room in the budget for another
// fetch). With no room for its first fetch it fails with errBudget.
func (s *Server) scan(ctx context.Context, sc *compiled, sh *share, from []int64, limit int) (*answer, bool, error) {
	n := len(from)
	pos := slices.Clone(from)
	a := &answer{from: slices.Clone(from)}
	lso := make([]int64, n)
	for p := range lso {
		lso[p] = -1 // unknown: read
	}
	// The partitions in an order that depends only on the cursor, so
	// that a repeated request reads the same, and no partition waits for
	// the others' backlog at every request; a partition that got nothing
	// while it had records (a response full before it) goes first next,
	// and the partitions of a leader just read go last.
	order := rotation(from)
	var starved []int32
	size, scanned := 0, 0
	full, spent := false, false
	for rounds := 0; rounds < maxRounds; rounds++ {
		var round []int32
		round = append(round, starved...)
		for _, p := range order {
			if (lso[p] < 0 || pos[p] < lso[p]) && !slices.Contains(starved, p) {
				round = append(round, p)
			}
		}
		starved = starved[:0]
		if len(round) == 0 || full || scanned >= s.cfg.MaxScan {
			break
		}
		ask := max(s.cfg.MaxAnswerBytes-size, 1)
		if !sh.hold(ctx, a.bytes+fetchCost(ask, int(s.cfg.MaxRecordBytes))) {
			if err := ctx.Err(); err != nil {
				return nil, false, err
			}
			if rounds == 0 {
				return nil, false, errBudget
			}
			spent = true
			break
		}
		got, err := s.fetchRound(ctx, round, pos, ask)
		if err != nil {
			return nil, false, err
		}
		for _, f := range got {
			p := f.partition
			lso[p] = f.lso
			if full || scanned >= s.cfg.MaxScan {
				continue
			}
			if len(f.recs) == 0 && f.next == pos[p] && (f.lso < 0 || pos[p] < f.lso) {
				starved = append(starved, p)
			}
			taken := 0
			for _, r := range f.recs {
				if len(a.bodies)+len(a.errs) >= limit || scanned >= s.cfg.MaxScan {
					full = len(a.bodies)+len(a.errs) >= limit
					break
				}
				e := subscriptions.NewEvent(r)
				match, body, terr := judge(sc.render, e, s.cfg.MaxAnswerBytes)
				var tc []byte
				if match {
					tc = appendObject(nil, e.TraceContext())
				}
				if match && terr == nil && len(a.bodies) > 0 && size+len(body)+len(tc) > s.cfg.MaxAnswerBytes {
					full = true
					break
				}
				scanned++
				taken++
				pos[p] = r.Offset + 1
				switch {
				case !match:
				case terr != nil:
					ee := entryError{id: string(r.Key), partition: p, offset: r.Offset, err: terr.Error(), trace: tc}
					a.errs = append(a.errs, ee)
					a.bytes += int64(len(ee.id) + len(ee.err) + len(tc) + 64)
				default:
					a.bodies = append(a.bodies, detach(body, r.Value))
					a.traces = append(a.traces, tc)
					size += len(body) + len(tc)
					a.bytes += int64(len(body) + len(tc))
				}
			}
			if taken == len(f.recs) {
				pos[p] = f.next
			}
		}
		sh.keep(a.bytes) // the fetch's records are the answer's now, or gone
		order = readLast(order, got)
	}
	a.to = pos
	more := spent
	for p := range pos {
		more = more || lso[p] >= 0 && pos[p] < lso[p]
	}
	return a, more, nil
}

// detach returns body out of the fetch's buffers when it is the record's
// value itself (an event served as is), so that the buffers go once the
// fetch's records are taken; a transform's result is its own already.
func detach(body, value []byte) []byte {
	if len(body) > 0 && len(body) == len(value) && &body[0] == &value[0] {
		return bytes.Clone(body)
	}
	return body
}

// readLast returns order with the partitions of got at its end: the
// next fetch goes to another leader, when one has partitions to read.
func readLast(order []int32, got []fetched) []int32 {
	read := make([]int32, 0, len(got))
	for _, f := range got {
		read = append(read, f.partition)
	}
	return append(slices.DeleteFunc(order, func(p int32) bool { return slices.Contains(read, p) }), read...)
}

// fetchRound fetches the round's partitions led by the leader of its
// first from pos, asking for ask bytes, moving a position out of the log
// (gone with retention, or past the end) to its start or end first.
func (s *Server) fetchRound(ctx context.Context, round []int32, pos []int64, ask int) ([]fetched, error) {
	got, err := s.fetch.fetch(ctx, round, pos, int32(ask))
	if !errors.Is(err, errOutOfRange) {
		return got, err
	}
	if err := s.clamp(ctx, pos); err != nil {
		return nil, err
	}
	return s.fetch.fetch(ctx, round, pos, int32(ask))
}

// clamp moves each position into its partition's log.
func (s *Server) clamp(ctx context.Context, pos []int64) error {
	adm := kadm.NewClient(s.cl)
	topic := string(s.cfg.Names.Events)
	starts, err := s.listOffsets(ctx, adm.ListStartOffsets, "start offsets")
	if err != nil {
		return err
	}
	ends, err := s.listOffsets(ctx, adm.ListEndOffsets, "end offsets")
	if err != nil {
		return err
	}
	for p := range pos {
		if o, ok := starts.Lookup(topic, int32(p)); ok {
			pos[p] = max(pos[p], o.Offset)
		}
		if o, ok := ends.Lookup(topic, int32(p)); ok {
			pos[p] = min(pos[p], o.Offset)
		}
	}
	return nil
}

// listOffsets returns what list (a kadm.Client's ListStartOffsets or
// ListEndOffsets) lists of the events topic, its failure named by what.
func (s *Server) listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), what string) (kadm.ListedOffsets, error) {
	listed, err := list(ctx, string(s.cfg.Names.Events))
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("pull: %s: %w", what, err)
	}
	return listed, nil
}

// judge is what sub's consumer receives of e: whether it matches, and its
// body or the transform's failure.
func judge(c *subscriptions.Compiled, e *subscriptions.Event, limit int) (bool, []byte, error) {
	if !c.Match(e).Match {
		return false, nil, nil
	}
	body, err := c.Render(e, limit)
	return true, body, err
}

// rotation is the partitions from one that depends on pos alone.
func rotation(pos []int64) []int32 {
	h := fnv.New32a()
	for _, o := range pos {
		h.Write(strconv.AppendInt(nil, o, 10))
	}
	n := len(pos)
	start := int(h.Sum32() % uint32(max(n, 1)))
	order := make([]int32, 0, n)
	for i := range n {
		order = append(order, int32((start+i)%n))
	}
	return order
}
