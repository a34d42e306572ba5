package access

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/topics"
)

// Config configures the tokens.
type Config struct {
	// MaxTokens is how many tokens may exist (HOOKSTREAM_MAX_TOKENS).
	// Default 10000.
	MaxTokens int
}

// DefaultMaxTokens is the default of Config.MaxTokens.
const DefaultMaxTokens = 10_000

// Service is the access tokens of a deployment, as this instance follows
// them in the access topic: made, listed and revoked through the admin
// API (Mount) and judged for every request to it (Authenticate).
type Service struct {
	c     topics.Cluster
	max   int
	log   *slog.Logger
	skips *topics.Skipper
	now   func() time.Time

	mu       sync.Mutex
	tokens   map[string]stored   // by id
	byDigest map[[32]byte]string // id by digest
	used     map[string]time.Time
	next     map[int32]int64 // per partition, the offset after the last record read
	loaded   bool            // read to the end the topic had when Run began
	moved    chan struct{}   // closed and replaced whenever next moves
}

// New builds the service over c; reg counts the records of the access
// topic it skips. It does no I/O.
func New(cfg Config, c topics.Cluster, log *slog.Logger, reg prometheus.Registerer) *Service {
	s := &Service{
		c: c, max: cmp.Or(cfg.MaxTokens, DefaultMaxTokens), log: log.With("component", "access"),
		skips: topics.NewSkipper(log), now: time.Now,
		tokens: make(map[string]stored), byDigest: make(map[[32]byte]string), used: make(map[string]time.Time),
		next: make(map[int32]int64), moved: make(chan struct{}),
	}
	s.skips.MustRegister(reg)
	s.skips.Count(c.Names.Access)
	return s
}

// Authenticate returns the identity of the holder of secret; false when
// no token has it, or it expired, and for every token until the service
// has read the tokens the topic held when it started (a token read before
// its revocation is not accepted in between). Unknown, revoked and
// expired tokens are refused alike.
//
// The lookup is a map keyed by the SHA-256 digest of the presented
// secret, and that is no oracle: how long it takes depends on the digest
// of what the caller sent (a value the caller knows anyway) and on Go's
// map hash, seeded at random per process; the most it could leak is how
// a stored digest compares with the caller's own, and a digest is of no
// use without a preimage of 256 random bits. No byte of a stored secret
// is ever compared with the caller's.
func (s *Service) Authenticate(secret string) (admin.Identity, bool) {
	d := digest(secret)
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.byDigest[d]
	if !ok || !s.loaded {
		return admin.Identity{}, false
	}
	t, now := s.tokens[id], s.now()
	if t.expired(now) {
		return admin.Identity{}, false
	}
	s.used[id] = now
	return t.Identity(), true
}

// Ready reports whether the service has read the tokens the topic held
// when it started: until then only HOOKSTREAM_ADMIN_TOKEN is accepted.
func (s *Service) Ready(context.Context) (bool, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded, map[string]int{"tokens": len(s.tokens)}
}

// List returns every token, oldest first, once this instance has read
// every token written before it was called.
func (s *Service) List(ctx context.Context) ([]Token, error) {
	if err := s.CatchUp(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Token, 0, len(s.tokens))
	for _, id := range slices.Sorted(maps.Keys(s.tokens)) {
		t := s.tokens[id].Token
		if at, ok := s.used[id]; ok {
			t.LastUsedAt = &at
		}
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b Token) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Create makes a token of t's name, role and team that expires after ttl
// (0: never) and returns it with its secret, the only time the secret is
// shown.
func (s *Service) Create(ctx context.Context, t Token, ttl time.Duration) (Token, string, error) {
	now := s.now().UTC()
	t.ID, t.CreatedAt, t.ExpiresAt, t.LastUsedAt = newID(), now, time.Time{}, nil
	if ttl < 0 {
		return Token{}, "", fmt.Errorf("%w: expires: want a positive duration", ErrInvalid)
	}
	if ttl > 0 {
		t.ExpiresAt = now.Add(ttl)
	}
	if err := t.Validate(); err != nil {
		return Token{}, "", err
	}
	secret := newSecret()
	d := digest(secret)
	value, err := json.Marshal(stored{Token: t, Digest: hex.EncodeToString(d[:])})
	if err != nil {
		return Token{}, "", fmt.Errorf("access: encode: %w", err)
	}
	err = s.write(ctx, func() (*kgo.Record, error) {
		if len(s.tokens) >= s.max {
			return nil, fmt.Errorf("%w of %d reached (HOOKSTREAM_MAX_TOKENS); revoke one first", ErrLimit, s.max)
		}
		return &kgo.Record{Topic: string(s.c.Names.Access), Key: []byte(t.ID), Value: value}, nil
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// Revoke tombstones token id: no instance accepts it once it has read
// the tombstone, this one at once.
func (s *Service) Revoke(ctx context.Context, id string) error {
	return s.write(ctx, func() (*kgo.Record, error) {
		if _, ok := s.tokens[id]; !ok {
			return nil, fmt.Errorf("%w: %.70s", ErrNotFound, id)
		}
		return &kgo.Record{Topic: string(s.c.Names.Access), Key: []byte(id)}, nil
	})
}

// write writes the record build makes of the tokens, in a transaction
// under the transactional id every writer of the topic shares: beginning
// it fences any write in progress, so build sees every token committed
// before (the limit holds across instances), and a write fenced by a
// later one fails with ErrConflict. It returns once this instance has
// read the record. build runs holding the lock.
func (s *Service) write(ctx context.Context, build func() (*kgo.Record, error)) error {
	cl, err := s.c.NewClient(kgo.TransactionalID(s.c.Names.AccessWriter()), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		return fmt.Errorf("access: writer: %w", err)
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("access: writer: %w", err)
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("access: begin: %w", err)
	}
	if err := s.CatchUp(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	rec, err := build()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return lost(fmt.Errorf("access: write %s: %w", rec.Key, err))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return lost(fmt.Errorf("access: commit %s: %w", rec.Key, err))
	}
	return s.await(ctx, func() bool { return s.next[rec.Partition] > rec.Offset })
}

// lost is err as ErrConflict when a concurrent write fenced it.
func lost(err error) error {
	if topics.Fenced(err) {
		return fmt.Errorf("%w (%v)", ErrConflict, err)
	}
	return err
}

// CatchUp waits until this instance has read every token committed
// before it was called.
func (s *Service) CatchUp(ctx context.Context) error {
	ends, err := s.ends(ctx)
	if err != nil {
		return err
	}
	return s.await(ctx, func() bool {
		for p, end := range ends {
			if s.next[p] < end {
				return false
			}
		}
		return true
	})
}

// await waits until done, called holding the lock, reports true.
func (s *Service) await(ctx context.Context, done func() bool) error {
	for {
		s.mu.Lock()
		ok, moved := done(), s.moved
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("access: still reading the tokens: %w", ctx.Err())
		case <-moved:
		}
	}
}

// ends lists the last stable offset of each partition of the access
// topic that has records.
func (s *Service) ends(ctx context.Context) (map[int32]int64, error) {
	listed, err := s.c.Admin().ListCommittedOffsets(ctx, string(s.c.Names.Access))
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("access: end offsets: %w", err)
	}
	ends := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			ends[o.Partition] = o.Offset
		}
	})
	return ends, nil
}

// Run follows the access topic from its start until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	var loading map[int32]int64
	for {
		var err error
		if loading, err = s.ends(ctx); err == nil {
			break
		}
		s.log.Warn("access: end offsets; trying again", "err", err)
		if !wait.Wait(ctx) {
			return nil
		}
	}
	cl, err := s.c.NewClient(
		kgo.ConsumeTopics(string(s.c.Names.Access)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers move the offsets read past the last
		// record, so that CatchUp sees the end.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(time.Second),
	)
	if err != nil {
		return fmt.Errorf("access: client: %w", err)
	}
	defer cl.Close()
	s.mu.Lock()
	s.loaded = len(loading) == 0
	s.mu.Unlock()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("reading access tokens", "topic", t, "partition", p, "err", err)
		})
		s.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) {
			s.next[rec.Partition] = rec.Offset + 1
			s.skips.Apply(rec, s.apply)
			if end, ok := loading[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(loading, rec.Partition)
			}
		})
		s.loaded = len(loading) == 0
		close(s.moved)
		s.moved = make(chan struct{})
		s.mu.Unlock()
	}
}

// apply folds one record of the access topic into the tokens, called
// holding the lock: a tombstone revokes, a value must be a valid token
// under its own id. It refuses a record that is not, and a token past
// the limit, which Run skips and counts.
func (s *Service) apply(rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		s.forget(id)
		return nil
	}
	var t stored
	if err := json.Unmarshal(rec.Value, &t); err != nil {
		return err
	}
	var d [32]byte
	if n, err := hex.Decode(d[:], []byte(t.Digest)); err != nil || n != len(d) || len(t.Digest) != 2*len(d) {
		return errors.New("the digest is not 64 hex digits")
	}
	switch _, known := s.tokens[id]; {
	case t.ID != id:
		return fmt.Errorf("the token's id %.70q is not the record's key", t.ID)
	case s.byDigest[d] != "" && s.byDigest[d] != id:
		return fmt.Errorf("the digest is token %s's", s.byDigest[d])
	case !known && len(s.tokens) >= s.max:
		return fmt.Errorf("past the limit of %d tokens (HOOKSTREAM_MAX_TOKENS)", s.max)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	t.LastUsedAt = nil
	s.forget(id)
	s.tokens[id], s.byDigest[d] = t, id
	return nil
}

// forget drops token id, called holding the lock.
func (s *Service) forget(id string) {
	if t, ok := s.tokens[id]; ok {
		var d [32]byte
		_, _ = hex.Decode(d[:], []byte(t.Digest)) // checked by apply
		delete(s.byDigest, d)
		delete(s.tokens, id)
		delete(s.used, id)
	}
}
