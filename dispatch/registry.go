package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

// ErrNotFound is returned for an unknown subscription id.
var ErrNotFound = errors.New("subscription not found")

// ErrExists is returned when creating a subscription whose id is taken.
var ErrExists = errors.New("subscription exists")

// Registry reads and writes subscriptions in the compacted subscriptions
// topic: the record key is the id, a tombstone deletes. It needs no running
// daemon: the CLI and the admin API write the topic directly.
type Registry struct {
	cl    *kgo.Client
	opts  []kgo.Opt
	names topics.Names
	log   *slog.Logger
	now   func() time.Time
}

// NewRegistry writes with cl (acks=all) and reads with fresh clients built
// from opts (seed brokers, logger).
func NewRegistry(cl *kgo.Client, opts []kgo.Opt, names topics.Names, log *slog.Logger) *Registry {
	return &Registry{cl: cl, opts: opts, names: names, log: log, now: time.Now}
}

// List reads every subscription.
func (r *Registry) List(ctx context.Context) (map[string]Subscription, error) {
	topic := string(r.names.Subscriptions)
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("subscriptions: end offsets: %w", err)
	}
	want := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	subs := make(map[string]Subscription)
	if len(want) == 0 {
		return subs, nil
	}
	cl, err := kgo.NewClient(append(r.opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
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
		var decodeErr error
		fs.EachRecord(func(rec *kgo.Record) {
			if err := apply(subs, rec); err != nil && decodeErr == nil {
				decodeErr = err
			}
			if rec.Offset+1 >= want[rec.Partition] {
				delete(want, rec.Partition)
			}
		})
		if decodeErr != nil {
			return nil, decodeErr
		}
	}
	return subs, nil
}

// apply folds one subscriptions record into subs.
func apply(subs map[string]Subscription, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		delete(subs, id)
		return nil
	}
	var s Subscription
	if err := json.Unmarshal(rec.Value, &s); err != nil {
		return fmt.Errorf("subscriptions: record %d (%s): %w", rec.Offset, id, err)
	}
	subs[id] = s
	return nil
}

// Get returns one subscription or ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (Subscription, error) {
	subs, err := r.List(ctx)
	if err != nil {
		return Subscription{}, err
	}
	s, ok := subs[id]
	if !ok {
		return Subscription{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

// Put validates and writes s.
func (r *Registry) Put(ctx context.Context, s Subscription) error {
	if err := s.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("subscriptions: encode: %w", err)
	}
	rec := &kgo.Record{Topic: string(r.names.Subscriptions), Key: []byte(s.ID), Value: v}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("subscriptions: write %s: %w", s.ID, err)
	}
	return nil
}

// Delete tombstones a subscription.
func (r *Registry) Delete(ctx context.Context, id string) error {
	if _, err := r.Get(ctx, id); err != nil {
		return err
	}
	rec := &kgo.Record{Topic: string(r.names.Subscriptions), Key: []byte(id)}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("subscriptions: delete %s: %w", id, err)
	}
	return nil
}

// Create fills in the defaults of a new subscription (id, secret, in-flight
// bound, enabled, timestamps), sets where its consumer group starts (from:
// "" or "latest" for the end of the events topic now, "earliest", or an
// RFC 3339 time), and writes it. The group's offsets are committed before
// the subscription is visible, so no dispatcher starts it elsewhere.
func (r *Registry) Create(ctx context.Context, s *Subscription, from string) error {
	now := r.now().UTC()
	if s.ID == "" {
		s.ID = NewID()
	}
	if s.Secret == "" {
		s.Secret = signature.NewSecret()
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	s.Enabled = true
	s.CreatedAt, s.UpdatedAt = now, now
	if err := s.Validate(); err != nil {
		return err
	}
	if _, err := r.Get(ctx, s.ID); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, s.ID)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	if err := r.setStart(ctx, s.ID, from); err != nil {
		return err
	}
	return r.Put(ctx, *s)
}

// setStart commits the starting offsets of a new subscription's group.
func (r *Registry) setStart(ctx context.Context, id, from string) error {
	adm := kadm.NewClient(r.cl)
	events := string(r.names.Events)
	var listed kadm.ListedOffsets
	var err error
	switch from {
	case "", "latest":
		listed, err = adm.ListEndOffsets(ctx, events)
	case "earliest":
		listed, err = adm.ListStartOffsets(ctx, events)
	default:
		at, perr := time.Parse(time.RFC3339, from)
		if perr != nil {
			return fmt.Errorf("%w: from: %q is not earliest, latest or an RFC 3339 time", ErrInvalid, from)
		}
		listed, err = adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), events)
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return fmt.Errorf("from: list offsets of %s: %w", events, err)
	}
	if err := adm.CommitAllOffsets(ctx, string(r.names.SubscriptionGroup(id)), listed.Offsets()); err != nil {
		return fmt.Errorf("from: commit start offsets: %w", err)
	}
	return nil
}

// Watch calls fn with every subscription each time the topic changes,
// until ctx ends. It reads with its own client.
func (r *Registry) Watch(ctx context.Context, fn func(map[string]Subscription)) error {
	cl, err := kgo.NewClient(append(r.opts,
		kgo.ConsumeTopics(string(r.names.Subscriptions)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	)...)
	if err != nil {
		return fmt.Errorf("subscriptions: client: %w", err)
	}
	defer cl.Close()
	subs := make(map[string]Subscription)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			r.log.Warn("reading subscriptions", "topic", t, "partition", p, "err", err)
		})
		changed := false
		fs.EachRecord(func(rec *kgo.Record) {
			if err := apply(subs, rec); err != nil {
				r.log.Error("skipping unreadable subscription record", "offset", rec.Offset, "err", err)
				return
			}
			changed = true
		})
		if changed {
			snapshot := make(map[string]Subscription, len(subs))
			for k, v := range subs {
				snapshot[k] = v
			}
			fn(snapshot)
		}
	}
}
