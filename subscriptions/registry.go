package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

// Errors a caller branches on: the admin API answers them 404 and 409
// (admin.Error).
var (
	// ErrNotFound is returned for an unknown subscription id.
	ErrNotFound = admin.NotFound("subscription not found")
	// ErrExists is returned when creating a subscription whose id is
	// taken.
	ErrExists = admin.Refused("subscription exists")
	// ErrConflict is returned when a write kept losing to concurrent
	// writers.
	ErrConflict = admin.Refused("subscription changed concurrently; try again")
	// ErrLimit is returned when creating a subscription past
	// Security.MaxSubscriptions.
	ErrLimit = admin.Refused("subscription limit")
)

// Registry reads and writes subscriptions in the compacted subscriptions
// topic: the record key is the id, a tombstone deletes. It needs no running
// daemon: the CLI and the admin API write the topic directly.
//
// Every write is a read-modify-write in a Kafka transaction under one
// transactional id shared by all writers (CLI, admin API, dispatchers):
// starting a write fences any write in progress, which aborts, so a write
// commits only if no other write began between its read of the latest
// records and its commit. A write that lost is tried again on the new
// state; none overwrites a change it did not see.
//
// While a Watch runs (in a daemon's dispatcher), Get answers from its
// snapshot once the snapshot has caught up with the topic's last stable
// offsets, so a reader still sees every write committed before it asked.
type Registry struct {
	c   topics.Cluster
	log *slog.Logger
	now func() time.Time
	sec Security
	// replicas of the topics created for topic subscriptions.
	replicas int16
	// skips skips the records that are not subscriptions.
	skips *topics.Skipper

	mu      sync.Mutex
	watched *snapshot     // nil while no Watch has loaded
	moved   chan struct{} // closed when watched changes
}

// snapshot is what a Watch has read: the subscriptions, and per partition
// the offset after the last record read.
type snapshot struct {
	subs map[string]Subscription
	next map[int32]int64
}

// NewRegistry reads end offsets with c's shared client and reads and
// writes with clients of c's own.
func NewRegistry(c topics.Cluster, log *slog.Logger) *Registry {
	r := &Registry{c: c, log: log, now: time.Now, moved: make(chan struct{}), skips: topics.NewSkipper(log)}
	r.skips.Count(c.Names.Subscriptions)
	return r
}

// Instrument registers r's metrics on reg and returns r: a daemon's
// registry counts the records of the subscriptions topic it skipped
// (hookstream_registry_records_skipped_total). Call it before using r.
func (r *Registry) Instrument(reg prometheus.Registerer) *Registry {
	r.skips.MustRegister(reg)
	return r
}

// Security is how a registry guards subscriptions.
type Security struct {
	// Keys encrypt secrets at rest; nil stores them as they are
	// (HOOKSTREAM_SECRET_KEY unset).
	Keys *SecretKeys
	// RequireHTTPS refuses to create a subscription with, or change one to,
	// a URL that is not https (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS). Loopback
	// URLs are let through: TLS to this host protects nothing, and only
	// HOOKSTREAM_DELIVERY_ALLOW_PRIVATE lets deliveries reach them.
	RequireHTTPS bool
	// MaxSubscriptions refuses to create a subscription while this many
	// exist (HOOKSTREAM_MAX_SUBSCRIPTIONS): each enabled one costs every
	// dispatcher a Kafka client and a consumer group. 0: no limit.
	MaxSubscriptions int
}

// Replicas sets the replication factor of the topics r creates for topic
// subscriptions (HOOKSTREAM_REPLICATION_FACTOR; 0: as many as the cluster
// has brokers, at most 3) and returns r. Call it before using r.
func (r *Registry) Replicas(rf int16) *Registry {
	r.replicas = rf
	return r
}

// Secure sets how r guards subscriptions and returns r. Call it before
// using r.
func (r *Registry) Secure(sec Security) *Registry {
	r.sec = sec
	return r
}

// CheckURL reports whether url may be a subscription's: ValidateURL, then
// https when required.
func (r *Registry) CheckURL(url string) error {
	if err := ValidateURL(url); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if r.sec.RequireHTTPS {
		if err := requireHTTPS(url); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// List reads every committed subscription, secrets decrypted. A record
// that is not a subscription, or whose secrets do not open, is skipped
// (see topics.Skipper and open).
func (r *Registry) List(ctx context.Context) (map[string]Subscription, error) {
	stored, err := r.read(ctx)
	if err != nil {
		return nil, err
	}
	subs, _, _ := r.open(stored)
	return subs, nil
}

// open decrypts the secrets of stored subscriptions; stale lists the ids
// not sealed with the current key, in id order. A subscription whose
// sealed secrets do not open is skipped, logged and counted once: a
// record forged or corrupted by a writer to the topic must stop no
// reader. A missing or wrong key skips every sealed subscription, which
// Reseal, run as a process starts, refuses loudly.
func (r *Registry) open(stored map[string]Subscription) (subs map[string]Subscription, stale []string, skipped []error) {
	return r.openReporting(stored, true)
}

// openReporting is open, logging and counting what it skips when report
// is true.
func (r *Registry) openReporting(stored map[string]Subscription, report bool) (subs map[string]Subscription, stale []string, skipped []error) {
	subs = make(map[string]Subscription, len(stored))
	for _, id := range slices.Sorted(maps.Keys(stored)) {
		s, current, err := r.sec.Keys.openSecrets(stored[id])
		if err != nil {
			if report {
				r.skips.Refuse(string(r.c.Names.Subscriptions), id, err)
			}
			skipped = append(skipped, err)
			continue
		}
		if !current {
			stale = append(stale, id)
		}
		subs[id] = s
	}
	return subs, stale, skipped
}

// CheckKeys fails with ErrSecretKey when stored subscriptions have sealed
// secrets and the keys (or their absence) open none of them, as Reseal
// does, without writing anything: for readers that show subscriptions to
// people, who must not be shown fewer without being told why.
func (r *Registry) CheckKeys(ctx context.Context) error {
	stored, err := r.read(ctx)
	if err != nil {
		return err
	}
	subs, _, skipped := r.openReporting(stored, false) // the caller reports the refusal
	return keysOpen(stored, subs, skipped)
}

// keysOpen is the check of CheckKeys over what open made of stored: the
// first refusal when some were skipped and no sealed one opened.
func keysOpen(stored, subs map[string]Subscription, skipped []error) error {
	if len(skipped) == 0 {
		return nil
	}
	for id := range subs {
		if sealed(stored[id]) {
			return nil // the keys open a sealed secret: they are right
		}
	}
	if len(skipped) == 1 {
		return skipped[0]
	}
	return fmt.Errorf("%w (and %d more subscriptions)", skipped[0], len(skipped)-1)
}

// sealed reports whether any of s's secrets and header values is sealed.
func sealed(s Subscription) bool {
	if strings.HasPrefix(s.Secret, sealedPrefix) || strings.HasPrefix(s.PreviousSecret, sealedPrefix) {
		return true
	}
	for _, v := range s.Headers {
		if strings.HasPrefix(v, sealedPrefix) {
			return true
		}
	}
	return false
}

// Reseal rewrites every subscription whose secrets are not sealed with the
// current key (written before a key was set, or with the previous key of
// a rotation) and returns how many it rewrote. It fails with ErrSecretKey
// when stored subscriptions have sealed secrets and the keys (or their
// absence) open none of them: a missing or wrong HOOKSTREAM_SECRET_KEY,
// which readers would otherwise meet as every such subscription skipped.
func (r *Registry) Reseal(ctx context.Context) (int, error) {
	stored, err := r.read(ctx)
	if err != nil {
		return 0, err
	}
	subs, stale, skipped := r.open(stored)
	if err := keysOpen(stored, subs, skipped); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range stale {
		_, err := r.Update(ctx, id, func(*Subscription) error { return nil })
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return n, fmt.Errorf("subscriptions: re-encrypt %s: %w", id, err)
		default:
			n++
		}
	}
	return n, nil
}

// read reads every committed subscription as stored.
func (r *Registry) read(ctx context.Context) (map[string]Subscription, error) {
	topic := string(r.c.Names.Subscriptions)
	want, err := r.committedEnds(ctx)
	if err != nil {
		return nil, err
	}
	subs := make(map[string]Subscription)
	if len(want) == 0 {
		return subs, nil
	}
	cl, err := r.c.NewClient(readOpts(topic)...)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: client: %w", err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("subscriptions: read: %w", err)
		}
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("subscriptions: read: %w", err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			r.skips.Apply(rec, func(rec *kgo.Record) error { return apply(subs, rec) })
			if rec.Offset+1 >= want[rec.Partition] {
				delete(want, rec.Partition)
			}
		})
	}
	return subs, nil
}

// readOpts read the subscriptions topic from its start, committed writes
// only, with the transaction markers kept so a reader sees the last offset.
func readOpts(topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}
}

// apply folds one subscriptions record into subs: a tombstone deletes, a
// value must be a subscription under its own id. It refuses a record that
// is not, which its readers skip (see topics.Skipper).
func apply(subs map[string]Subscription, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		delete(subs, id)
		return nil
	}
	var s Subscription
	if err := json.Unmarshal(rec.Value, &s); err != nil {
		return err
	}
	switch {
	case s.ID != id:
		return fmt.Errorf("the subscription's id %.64q is not the record's key", s.ID)
	case !validID(id):
		return fmt.Errorf("%.64q is not a valid id", id)
	}
	if s.BatchMax == 0 {
		s.BatchMax = 1 // written before batching existed
	}
	subs[id] = s
	return nil
}

// Get returns one subscription or ErrNotFound: from the watched snapshot
// when there is one, else by reading the topic.
func (r *Registry) Get(ctx context.Context, id string) (Subscription, error) {
	if subs, ok := r.watchedAtEnd(ctx); ok {
		return find(subs, id)
	}
	subs, err := r.List(ctx)
	if err != nil {
		return Subscription{}, err
	}
	return find(subs, id)
}

// snapshotWait bounds how long Get waits for the watched snapshot to
// reach the end of the topic before it reads the topic itself.
const snapshotWait = 2 * time.Second

// watchedAtEnd returns the watched subscriptions once the snapshot has
// read up to the topic's current last stable offsets; false when there is
// no snapshot, the offsets cannot be listed, or the snapshot does not
// catch up within snapshotWait.
func (r *Registry) watchedAtEnd(ctx context.Context) (map[string]Subscription, bool) {
	r.mu.Lock()
	watching := r.watched != nil
	r.mu.Unlock()
	if !watching {
		return nil, false
	}
	ends, err := r.committedEnds(ctx)
	if err != nil {
		return nil, false
	}
	timeout := time.NewTimer(snapshotWait)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		snap, moved := r.watched, r.moved
		r.mu.Unlock()
		if snap == nil {
			return nil, false
		}
		if caughtUp(snap.next, ends) {
			return snap.subs, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-timeout.C:
			return nil, false
		case <-moved:
		}
	}
}

func caughtUp(next, ends map[int32]int64) bool {
	for p, end := range ends {
		if next[p] < end {
			return false
		}
	}
	return true
}

// publish makes subs and next the watched snapshot; with subs nil, there
// is none.
func (r *Registry) publish(subs map[string]Subscription, next map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watched = nil
	if subs != nil {
		r.watched = &snapshot{subs: maps.Clone(subs), next: maps.Clone(next)}
	}
	close(r.moved)
	r.moved = make(chan struct{})
}

func find(subs map[string]Subscription, id string) (Subscription, error) {
	s, ok := subs[id]
	if !ok {
		return Subscription{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

// Update applies edit to the latest version of subscription id and writes
// the result, stamped with a later UpdatedAt. An error from edit aborts
// the write and is returned as is; a subscription deleted meanwhile gives
// ErrNotFound, and one that kept changing under the write ErrConflict.
// A change of Enabled writes its operational event (subscription.disabled
// or subscription.enabled) to the ingest topic in the same transaction:
// exactly once, whoever made the change (dispatcher, CLI, admin API).
func (r *Registry) Update(ctx context.Context, id string, edit func(*Subscription) error) (Subscription, error) {
	var out Subscription
	err := r.write(ctx, func(subs map[string]Subscription) ([]*kgo.Record, error) {
		s, err := find(subs, id)
		if err != nil {
			return nil, err
		}
		prev := s
		if err := edit(&s); err != nil {
			return nil, err
		}
		if s.URL != prev.URL && s.Kind() == KindWebhook {
			if err := r.CheckURL(s.URL); err != nil {
				return nil, err
			}
		}
		// A topic subscription's topic is created again when it is
		// enabled: stopped because its topic was deleted, say.
		if s.Kind() == KindTopic && (s.Topic != prev.Topic || s.Enabled && !prev.Enabled) {
			if err := r.checkTopic(subs, s); err != nil {
				return nil, err
			}
			if err := r.ensureTopic(ctx, s); err != nil {
				return nil, err
			}
		}
		// Strictly later than the version edited, whatever the clocks
		// of the writers say: UpdatedAt tells versions apart.
		s.UpdatedAt = r.now().UTC()
		if !s.UpdatedAt.After(prev.UpdatedAt) {
			s.UpdatedAt = prev.UpdatedAt.Add(time.Microsecond)
		}
		// An expression is compiled again only when it changed: one that
		// a later version of hookstream refuses must not block the other
		// changes (a dispatcher disabling the subscription, say).
		exprs := s.Filter != prev.Filter || s.Transform != prev.Transform
		rec, err := r.record(&s, exprs)
		if err != nil {
			return nil, err
		}
		out = s
		if s.Enabled == prev.Enabled {
			return []*kgo.Record{rec}, nil
		}
		return []*kgo.Record{rec, toggled(s).Record(r.c.Names.Ingest)}, nil
	})
	return out, err
}

// operatorDisabled is the reason of a subscription.disabled event when an
// operator disabled the subscription.
const operatorDisabled = "disabled by an operator"

// toggled is the operational event of s, just enabled or disabled.
func toggled(s Subscription) *topics.IngestRecord {
	o := &topics.Operational{Type: topics.OpSubscriptionEnabled, SubscriptionID: s.ID, At: s.UpdatedAt}
	if !s.Enabled {
		o.Type, o.Reason = topics.OpSubscriptionDisabled, s.DisabledReason
		if o.Reason == "" {
			o.Reason = operatorDisabled
		}
	}
	return o.IngestRecord(s.ID, s.UpdatedAt.Format(time.RFC3339Nano))
}

// Delete tombstones a subscription.
func (r *Registry) Delete(ctx context.Context, id string) error {
	return r.write(ctx, func(subs map[string]Subscription) ([]*kgo.Record, error) {
		if _, err := find(subs, id); err != nil {
			return nil, err
		}
		return []*kgo.Record{{Topic: string(r.c.Names.Subscriptions), Key: []byte(id)}}, nil
	})
}

// Create fills in the defaults of a new subscription (id, secret, in-flight
// bound, batch_max 1, enabled, timestamps), sets where its consumer group starts (from:
// "" or "latest" for the end of the events topic now, "earliest", or an
// RFC 3339 time), and writes it. The group's offsets are committed before
// the subscription is visible, so no dispatcher starts it elsewhere.
func (r *Registry) Create(ctx context.Context, s *Subscription, from string) error {
	now := r.now().UTC()
	if s.ID == "" {
		s.ID = NewID()
	}
	if s.Secret == "" && s.Kind() != KindTopic {
		s.Secret = signature.NewSecret()
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.BatchMax == 0 {
		s.BatchMax = 1
	}
	s.Enabled = true
	s.CreatedAt, s.UpdatedAt = now, now
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Kind() == KindWebhook {
		if err := r.CheckURL(s.URL); err != nil {
			return err
		}
	}
	if _, err := r.Get(ctx, s.ID); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, s.ID)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	// Checked before the group's offsets are committed, so a refused
	// subscription leaves no group behind, and again in the write, which
	// sees every subscription committed before it.
	subs, err := r.List(ctx)
	if err != nil {
		return err
	}
	if err := r.room(subs); err != nil {
		return err
	}
	if err := r.checkTopic(subs, *s); err != nil {
		return err
	}
	if err := r.setStart(ctx, s.ID, from); err != nil {
		return err
	}
	if err := r.ensureTopic(ctx, *s); err != nil {
		return err
	}
	return r.write(ctx, func(subs map[string]Subscription) ([]*kgo.Record, error) {
		if _, ok := subs[s.ID]; ok {
			return nil, fmt.Errorf("%w: %s", ErrExists, s.ID)
		}
		if err := r.room(subs); err != nil {
			return nil, err
		}
		if err := r.checkTopic(subs, *s); err != nil {
			return nil, err
		}
		rec, err := r.record(s, true)
		return []*kgo.Record{rec}, err
	})
}

// checkTopic refuses a topic subscription s whose topic is one of
// hookstream's own or Kafka's internal ones (topics.Names.Reserved), or
// the topic of another subscription of subs: two writers of one topic
// would interleave their events and neither could say which are its own.
func (r *Registry) checkTopic(subs map[string]Subscription, s Subscription) error {
	if s.Kind() != KindTopic {
		return nil
	}
	if r.c.Names.Reserved(s.Topic) {
		return fmt.Errorf("%w: topic: %s is hookstream's own (%s.*) or Kafka's internal (__*): name a topic of your own", ErrInvalid, s.Topic, r.c.Names.Prefix)
	}
	for _, id := range slices.Sorted(maps.Keys(subs)) {
		if o := subs[id]; id != s.ID && o.Topic == s.Topic {
			return fmt.Errorf("%w: topic: %s is subscription %s's already: a topic has one writer", ErrInvalid, s.Topic, id)
		}
	}
	return nil
}

// ensureTopic creates topic subscription s's topic when it is missing,
// as the events topic is: its partition count (an event keeps its
// partition), retention and record size limit; replicated as the
// registry's topics are (Replicas).
func (r *Registry) ensureTopic(ctx context.Context, s Subscription) error {
	if s.Kind() != KindTopic {
		return nil
	}
	adm := r.c.Admin()
	events := string(r.c.Names.Events)
	listed, err := adm.ListTopics(ctx, events)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return fmt.Errorf("subscriptions: topic %s: the events topic: %w", s.Topic, err)
	}
	described, err := adm.DescribeTopicConfigs(ctx, events)
	if err != nil {
		return fmt.Errorf("subscriptions: topic %s: the events topic's configs: %w", s.Topic, err)
	}
	rc, err := described.On(events, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("subscriptions: topic %s: the events topic's configs: %w", s.Topic, err)
	}
	configs := map[string]string{"cleanup.policy": "delete"}
	for _, c := range rc.Configs {
		if (c.Key == "retention.ms" || c.Key == "max.message.bytes") && c.Value != nil {
			configs[c.Key] = *c.Value
		}
	}
	spec := topics.Spec{Topic: topics.Topic(s.Topic), Partitions: int32(len(listed[events].Partitions)), Configs: configs}
	if _, err := topics.Ensure(ctx, r.c.Client, []topics.Spec{spec}, r.replicas); err != nil {
		return fmt.Errorf("subscriptions: %w", err)
	}
	return nil
}

// room returns ErrLimit when subs leave no room for one more subscription.
func (r *Registry) room(subs map[string]Subscription) error {
	if n := r.sec.MaxSubscriptions; n > 0 && len(subs) >= n {
		return fmt.Errorf("%w of %d reached (HOOKSTREAM_MAX_SUBSCRIPTIONS); delete one first", ErrLimit, n)
	}
	return nil
}

// record validates s (its filter and transform when exprs), makes its
// header names canonical, and encodes it, its secrets and header values
// sealed.
func (r *Registry) record(s *Subscription, exprs bool) (*kgo.Record, error) {
	if err := s.validate(exprs); err != nil {
		return nil, err
	}
	s.Headers = canonicalHeaders(s.Headers)
	v, err := json.Marshal(r.sec.Keys.sealSecrets(*s))
	if err != nil {
		return nil, fmt.Errorf("subscriptions: encode: %w", err)
	}
	return &kgo.Record{Topic: string(r.c.Names.Subscriptions), Key: []byte(s.ID), Value: v}, nil
}

// writeTries bounds how often a write that lost to a concurrent one is
// tried again before ErrConflict.
const writeTries = 8

// write reads every subscription and writes the records build derives
// from them (the subscription's first, then any operational event), in one
// transaction that commits only if no other write began
// meanwhile; a write that lost is tried again on the new state.
func (r *Registry) write(ctx context.Context, build func(map[string]Subscription) ([]*kgo.Record, error)) error {
	backoff := 20 * time.Millisecond
	for try := 1; ; try++ {
		err := r.writeOnce(ctx, build)
		if !topics.Fenced(err) {
			return err
		}
		if try == writeTries {
			return fmt.Errorf("%w (%v)", ErrConflict, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("subscriptions: write: %w", ctx.Err())
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff *= 2
	}
}

func (r *Registry) writeOnce(ctx context.Context, build func(map[string]Subscription) ([]*kgo.Record, error)) error {
	cl, err := r.c.NewClient(
		kgo.TransactionalID(r.c.Names.SubscriptionsWriter()),
		kgo.TransactionTimeout(time.Minute),
	)
	if err != nil {
		return fmt.Errorf("subscriptions: writer: %w", err)
	}
	defer cl.Close()
	// Taking the producer id fences (and aborts) any write in progress, so
	// what List reads next stays the latest until this commit.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("subscriptions: writer: %w", err)
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("subscriptions: begin: %w", err)
	}
	subs, err := r.List(ctx)
	if err != nil {
		return err
	}
	recs, err := build(subs)
	if err != nil {
		return err
	}
	rec := recs[0]
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("subscriptions: write %s: %w", rec.Key, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("subscriptions: commit %s: %w", rec.Key, err)
	}
	return r.awaitVisible(ctx, rec)
}

// awaitVisible returns once rec is below the last stable offset of its
// partition. A broker acknowledges a commit before it has written the
// commit markers, and read_committed readers see nothing past them: without
// this wait a `subscriptions add` followed at once by a list could miss
// the subscription just added.
func (r *Registry) awaitVisible(ctx context.Context, rec *kgo.Record) error {
	wait := backoff.New(time.Millisecond, 100*time.Millisecond)
	for {
		ends, err := r.committedEnds(ctx)
		if err != nil {
			return err
		}
		if ends[rec.Partition] > rec.Offset {
			return nil
		}
		if !wait.Wait(ctx) {
			return fmt.Errorf("subscriptions: %s committed, not yet visible: %w", rec.Key, ctx.Err())
		}
	}
}

// setStart commits the starting offsets of a new subscription's group.
func (r *Registry) setStart(ctx context.Context, id, from string) error {
	adm := r.c.Admin()
	events := string(r.c.Names.Events)
	var list func() (kadm.ListedOffsets, error)
	switch from {
	case "", "latest":
		list = func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, events) }
	case "earliest":
		list = func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, events) }
	default:
		at, err := time.Parse(time.RFC3339, from)
		if err != nil {
			return fmt.Errorf("%w: from: %q is not earliest, latest or an RFC 3339 time", ErrInvalid, from)
		}
		list = func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), events) }
	}
	var listed kadm.ListedOffsets
	err := settle(ctx, func() (err error) {
		listed, err = list()
		if err == nil {
			err = listed.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("from: list offsets of %s: %w", events, err)
	}
	if err := adm.CommitAllOffsets(ctx, string(r.c.Names.SubscriptionGroup(id)), listed.Offsets()); err != nil {
		return fmt.Errorf("from: commit start offsets: %w", err)
	}
	return nil
}

// Watch calls fn with every subscription once it has read the topic to
// the end it had when Watch began, then again each time the topic changes,
// until ctx ends. It reads with its own client. A subscription whose
// secret cannot be decrypted is skipped (see open).
func (r *Registry) Watch(ctx context.Context, fn func(map[string]Subscription)) error {
	topic := string(r.c.Names.Subscriptions)
	loading, err := r.ends(ctx)
	if err != nil {
		return nil // ctx ended
	}
	cl, err := r.c.NewClient(append(readOpts(topic), kgo.FetchMaxWait(time.Second))...)
	if err != nil {
		return fmt.Errorf("subscriptions: client: %w", err)
	}
	defer cl.Close()
	defer r.publish(nil, nil)
	stored := make(map[string]Subscription)
	subs := make(map[string]Subscription)
	next := make(map[int32]int64)
	changed, moved := true, true
	for {
		if changed && len(loading) == 0 {
			subs, _, _ = r.open(stored)
		}
		if moved && len(loading) == 0 {
			r.publish(subs, next)
		}
		if changed && len(loading) == 0 {
			fn(maps.Clone(subs))
		}
		changed, moved = false, false
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			r.log.Warn("reading subscriptions", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(rec *kgo.Record) {
			next[rec.Partition], moved = rec.Offset+1, true
			if end, ok := loading[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(loading, rec.Partition)
				changed = true
			}
			if r.skips.Apply(rec, func(rec *kgo.Record) error { return apply(stored, rec) }) {
				changed = true
			}
		})
	}
}

// ends lists the end offsets of the subscriptions topic, trying again
// while the cluster does not answer, until ctx ends.
func (r *Registry) ends(ctx context.Context) (map[int32]int64, error) {
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	for {
		ends, err := r.committedEnds(ctx)
		if err == nil {
			return ends, nil
		}
		if ctx.Err() == nil {
			r.log.Warn("subscriptions: end offsets; trying again", "err", err)
		}
		if !wait.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
}

// committedEnds lists the last stable offset of each partition of the
// subscriptions topic that has records: records past it belong to a write
// still in progress, which a read_committed reader cannot see yet.
func (r *Registry) committedEnds(ctx context.Context) (map[int32]int64, error) {
	var listed kadm.ListedOffsets
	err := settle(ctx, func() (err error) {
		listed, err = r.c.Admin().ListCommittedOffsets(ctx, string(r.c.Names.Subscriptions))
		if err == nil {
			err = listed.Error()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("subscriptions: end offsets: %w", err)
	}
	ends := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			ends[o.Partition] = o.Offset
		}
	})
	return ends, nil
}

// settleFor bounds how long settle tries again.
const settleFor = 10 * time.Second

// settle calls fn until it succeeds or fails otherwise than with a
// retriable Kafka error, for at most settleFor. Right after topics are
// created, brokers that have not heard of them yet answer
// UNKNOWN_TOPIC_OR_PARTITION for a moment (as during a leader election
// they answer NOT_LEADER_OR_FOLLOWER).
func settle(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(settleFor)
	wait := backoff.New(50*time.Millisecond, time.Second)
	for {
		err := fn()
		if err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) || !wait.Wait(ctx) {
			return err
		}
	}
}
