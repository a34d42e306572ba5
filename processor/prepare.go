package processor

import (
	"hash/maphash"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/statestore"
)

// prepareAhead bounds the records prepared (their state read, their events
// record built) ahead of the record being decided: the preparing goroutine
// waits when it is that far ahead. So at most prepareAhead events records
// (each within the record limit) and states wait for their decisions, not
// a whole poll's.
//
// Prepared records are handed over in chunks of up to prepareChunk, so
// that neither goroutine wakes the other for every record: a chunk goes
// as soon as the decisions have taken every chunk before it, else once
// full, by count or by the bytes of its events records. Ahead of the
// decisions are then the rest of the chunk being decided, the chunks
// queued, and the one being prepared: at most prepareAhead records, and
// (prepareQueue+2) chunks of under prepareChunkBytes plus one record each
// in bytes (about 6 MiB of small records' envelopes, 20 MiB at the
// largest records).
const (
	prepareAhead      = 512
	prepareChunk      = 64
	prepareChunkBytes = 1 << 20
	prepareQueue      = prepareAhead/prepareChunk - 2
)

// prepared is an ingest record's state in the store, its first events
// record or why it has none, and the time it is processed at.
type prepared struct {
	now time.Time
	// read is the record's key's state in the store, or readErr why it
	// could not be read, when isRead. A key an earlier record had is not
	// read: the decision on that record comes first and knows the key.
	isRead  bool
	read    statestore.Read
	readErr error
	// built says ev and err are set; a record taken for a duplicate is
	// not built.
	built bool
	ev    *kgo.Record
	err   error
}

// preparation prepares one partition's records, in their order, on a
// second goroutine: the state is read and the envelope built while the
// records before are decided. The store does not change during a
// transaction, so the state read is the one the decision would read.
type preparation struct {
	out  chan []prepared
	cur  []prepared // the chunk being decided
	quit chan struct{}
	done chan struct{}
}

// prepare starts preparing records from store. A record whose state, or
// an earlier record of the same key in records, makes it a duplicate
// gets no envelope (its decision builds one should it not be a duplicate
// after all). The caller takes the records with next, in order, and calls
// stop when it is done.
func (p *Processor) prepare(store *statestore.Store, records []*kgo.Record) *preparation {
	pp := &preparation{
		out:  make(chan []prepared, prepareQueue),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go func() {
		defer close(pp.done)
		// seen are the keys of the records before, by hash; true: the
		// next record of the key is likely a duplicate (the last one was,
		// or will have emitted its event). Both are hints (two keys may
		// share a hash): the decision reads a key it does not know, and
		// builds an envelope it needs.
		seed := maphash.MakeSeed()
		seen := make(map[uint64]bool)
		chunk := make([]prepared, 0, prepareChunk)
		chunkBytes := 0
		for i, r := range records {
			pr := prepared{now: p.now().UTC()}
			h := maphash.Bytes(seed, r.Key)
			dup, known := seen[h]
			if !known {
				pr.isRead = true
				pr.read.State, pr.read.OK, pr.readErr = store.Get(r.Key)
				dup = pr.readErr != nil || decide(pr.read.State, pr.read.OK, r, pr.now) == outcomeDuplicate
			}
			if !dup {
				pr.ev, pr.err = p.event(r, 0, pr.now)
				pr.built = true
				if pr.ev != nil {
					chunkBytes += len(pr.ev.Key) + len(pr.ev.Value)
				}
			}
			seen[h] = dup || pr.built && pr.err == nil
			chunk = append(chunk, pr)
			if len(chunk) == prepareChunk || chunkBytes >= prepareChunkBytes || i == len(records)-1 || len(pp.out) == 0 {
				select {
				case pp.out <- chunk:
				case <-pp.quit:
					return
				}
				chunk, chunkBytes = make([]prepared, 0, prepareChunk), 0
			}
		}
	}()
	return pp
}

// next takes the next record's preparation.
func (pp *preparation) next() *prepared {
	if len(pp.cur) == 0 {
		pp.cur = <-pp.out
	}
	pr := &pp.cur[0]
	pp.cur = pp.cur[1:]
	return pr
}

// stop ends the preparation, whether or not every record was taken.
func (pp *preparation) stop() {
	close(pp.quit)
	<-pp.done
}
