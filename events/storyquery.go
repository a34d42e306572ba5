package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// StoryQuery answers an event's story on the admin listener: from this
// instance's processor when it owns the event's partition, and otherwise
// forwarded to the instance whose processor does, signed with a key
// derived from the admin token and answered only when signed (peer.go).
// Every instance serves it, a processor or not.
type StoryQuery struct {
	// local is this instance's processor's ledger; nil when it runs none.
	local    Ledger
	registry *subscriptions.Registry
	c        topics.Cluster
	traceURL string
	log      *slog.Logger

	// Set by Mount from the admin listener's configuration: the key of
	// story queries between instances (nil: none), this instance's
	// advertised admin address and its listener.
	peer                 peerKey
	advertised, listener string
}

// Ledger is a processor's store as a story query reads it
// (processor.Processor). Lookup returns the state of key in ingest
// partition partition, ok false when the ledger does not hold it; its
// error wraps statestore.ErrNotOwned when the processor does not own the
// partition, statestore.ErrRestoring while the partition's store
// restores. InstanceID is the processor's static group instance id,
// which the processor group's description shows beside its member.
type Ledger interface {
	Lookup(partition int32, key []byte) (statestore.State, bool, error)
	InstanceID() string
}

// NewStoryQuery builds the story query of an instance whose processor's
// ledger is local (nil: it runs none): c's shared client finds
// partitions, owners and events records, clients of c's own read them,
// registry says which subscriptions are disabled, traceURL
// (HOOKSTREAM_TRACE_URL) links a story to its trace. It does no I/O.
func NewStoryQuery(local Ledger, registry *subscriptions.Registry, c topics.Cluster, traceURL string, log *slog.Logger) *StoryQuery {
	return &StoryQuery{local: local, registry: registry, c: c, traceURL: traceURL, log: log.With("component", "admin")}
}

// Mount serves GET /api/events/{source}:{event-id} on srv's guarded API,
// and the queries other instances forward under its /peer routes. It says,
// in one line, why story queries cannot be forwarded between this instance
// and the others, if they cannot.
func (a *StoryQuery) Mount(srv *admin.Server) {
	cfg := srv.Config()
	a.peer, a.advertised, a.listener = newPeerKey(cfg.Token), cmp.Or(cfg.AdvertisedAddr, cfg.Addr), cfg.Addr
	srv.Peer().GET(peerEventsRoute+"*", a.peerEvent, a.peerOnly)
	// A viewer's story has no errors, which may quote bodies; a team's
	// only its subscriptions' deliveries (Story.scoped).
	srv.API().GET("/events/*", a.event, admin.ReadersAndTeams...)
	if why := a.forwardingLimit(cfg); why != "" {
		a.log.Info(why)
	}
}

// forwardingLimit says, in one line, why story queries cannot be
// forwarded between this instance and the others, if they cannot.
func (a *StoryQuery) forwardingLimit(cfg admin.Config) string {
	if a.peer == nil {
		return "story queries are not forwarded between instances: without HOOKSTREAM_ADMIN_TOKEN they share no key to authenticate each other, so each answers only for its own processor's partitions"
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err == nil && cfg.AdvertisedAddr == "" && a.local != nil && admin.LoopbackHost(host) {
		return "story queries cannot be forwarded to this instance from other hosts: its admin listener " + cfg.Addr + " is loopback; set HOOKSTREAM_ADMIN_ADVERTISED_ADDR (and the listener) to an address they reach"
	}
	return ""
}

// event answers GET /api/events/{source}:{event-id} with the event's story
// as the caller may read it: from this processor's store when it owns the
// key's partition, else from the owner's, as the processor group's
// description names it.
func (a *StoryQuery) event(c *echo.Context) error { return a.answer(c, admin.Caller(c), false) }

// peerEvent answers a story query another instance forwarded (see
// peer.go), as the caller it names may read it: from this processor's
// store, never forwarded again.
func (a *StoryQuery) peerEvent(c *echo.Context) error {
	who, err := peerCaller(c.Request().URL.Query())
	if err != nil {
		return err
	}
	return a.answer(c, who, true)
}

func (a *StoryQuery) answer(c *echo.Context, who admin.Identity, forwarded bool) error {
	key := eventKey(c)
	if key == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "want /api/events/<source>:<event-id>")
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	partition, st, err := a.fromLocal(ctx, key, who)
	switch {
	case err == nil:
		return c.JSON(http.StatusOK, st)
	case errors.Is(err, ErrUnknownEvent):
		return echo.NewHTTPError(http.StatusNotFound, "no event "+key+" in the ledger (never received, or forgotten after HOOKSTREAM_DEDUP_TTL)")
	case errors.Is(err, statestore.ErrRestoring):
		c.Response().Header().Set("Retry-After", "5")
		return echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d of the ledger is restoring; try again shortly", partition))
	case !errors.Is(err, statestore.ErrNotOwned):
		return admin.Error(err)
	case forwarded:
		return echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d moved while the query was forwarded; try again", partition))
	}
	return a.forward(ctx, c, partition, key, who)
}

// eventKey is the key a story query names: its path after the route's
// prefix, decoded once. Not the router's wildcard, which is still escaped
// when the path needed escaping and decoded when not.
func eventKey(c *echo.Context) string {
	return strings.TrimPrefix(c.Request().URL.Path, strings.TrimSuffix(c.Path(), "*"))
}

// ErrUnknownEvent is an event the ledger does not hold: never received,
// or forgotten after its TTL; or, to a team, one in which none of its
// subscriptions has a part.
var ErrUnknownEvent = errors.New("unknown event")

// Story returns the story of key as GET /api/events/{key} answers it to
// who: from this instance's processor when it owns key's partition, else
// asked of the processor that does, signed as a forwarded query that names
// who's role and team, the owner telling the story as who may read it. A
// viewer's story has no errors, which may quote a payload or an answer,
// and no envelope may be shown with it; a team's has only its
// subscriptions' deliveries, and the envelope may be shown with it (one of
// them matched the event). An event the
// ledger does not hold is ErrUnknownEvent, a partition restoring
// statestore.ErrRestoring; an owner that cannot be asked is an *echo.HTTPError
// saying why.
func (a *StoryQuery) Story(ctx context.Context, key string, who admin.Identity) (Story, error) {
	partition, st, err := a.fromLocal(ctx, key, who)
	if !errors.Is(err, statestore.ErrNotOwned) {
		return st, err
	}
	if a.peer == nil {
		return Story{}, errNoPeerKey(partition)
	}
	addr, err := a.owner(ctx, nil, partition)
	if err != nil {
		return Story{}, err
	}
	status, body, err := a.peer.ask(ctx, addr, peerQuery(key, who))
	if err != nil {
		return Story{}, echo.NewHTTPError(http.StatusBadGateway, fmt.Sprintf("the owner of partition %d (%s) %v", partition, addr, err))
	}
	switch {
	case status == http.StatusNotFound:
		return Story{}, ErrUnknownEvent
	case status != http.StatusOK:
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		return Story{}, echo.NewHTTPError(status, cmp.Or(e.Error, http.StatusText(status)))
	case json.Unmarshal(body, &st) != nil:
		return Story{}, echo.NewHTTPError(http.StatusBadGateway, fmt.Sprintf("the owner of partition %d (%s) answered something other than a story", partition, addr))
	}
	return st, nil
}

// fromLocal returns key's partition and its story from this instance's
// processor, as who may read it; statestore.ErrNotOwned when it runs
// none, or does not own the partition.
func (a *StoryQuery) fromLocal(ctx context.Context, key string, who admin.Identity) (int32, Story, error) {
	partition, err := a.partitionOf(ctx, key)
	if err != nil {
		return 0, Story{}, err
	}
	if a.local == nil {
		return partition, Story{}, statestore.ErrNotOwned
	}
	st, err := a.localStory(ctx, partition, key, who)
	return partition, st, err
}

// errNoPeerKey says why a story owned by another instance cannot be asked
// for.
func errNoPeerKey(partition int32) error {
	return echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d of the ledger is owned by another instance, and without HOOKSTREAM_ADMIN_TOKEN instances share no key to authenticate each other, so none forwards a story query: set the same HOOKSTREAM_ADMIN_TOKEN on every instance, or ask the owner's admin API", partition))
}

// partitionOf is the partition of key in the ingest topic.
func (a *StoryQuery) partitionOf(ctx context.Context, key string) (int32, error) {
	topic := string(a.c.Names.Ingest)
	td, err := a.c.Admin().ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s not found: %v", topic, d.Err)
	}
	return topics.PartitionOf([]byte(key), len(d.Partitions)), nil
}

// localStory reads key from this processor's store, as who may read it.
func (a *StoryQuery) localStory(ctx context.Context, partition int32, key string, who admin.Identity) (Story, error) {
	st, ok, err := a.local.Lookup(partition, []byte(key))
	if err != nil {
		return Story{}, err
	}
	if !ok {
		return Story{}, ErrUnknownEvent
	}
	subs, err := a.registry.List(ctx)
	if err != nil {
		return Story{}, err
	}
	disabled := func(id string) bool { s, ok := subs[id]; return ok && !s.Enabled }
	s, ok := StoryOf(key, st, disabled).scoped(who, func(id string) string { return subs[id].Team })
	if !ok {
		return Story{}, ErrUnknownEvent
	}
	if trace.TraceFlags(st.Trace.Flags).IsSampled() {
		s.TraceURL = tracing.Link(a.traceURL, s.TraceID)
	}
	if s.Events, err = a.eventsRecord(ctx, s); err != nil {
		return Story{}, err
	}
	return s, nil
}

// eventsScanLimit bounds the records read to find an events record.
const eventsScanLimit = 10_000

// eventsRecord finds the latest events record of the event whose story s
// is. The ledger keeps when the event was last emitted, not where: that
// would cost the processor a second round trip to the broker in every
// transaction. The record is in the partition of the ingest record (the
// topics are co-partitioned), written at or after that time: the first
// record from there with the event's key and replay count, read
// read_committed. Nil for a failed event, or one whose record is no longer
// retained or lies beyond the scan limit.
func (a *StoryQuery) eventsRecord(ctx context.Context, s Story) (*Position, error) {
	if s.Failure != nil {
		return nil, nil
	}
	at, replay := s.ProcessedAt, ""
	if s.Replays.LastAt != nil {
		at, replay = *s.Replays.LastAt, strconv.FormatUint(uint64(s.Replays.Count), 10)
	}
	span := topics.Span{From: topics.At(at), Stable: true, Partitions: []int32{s.Partition}, First: eventsScanLimit}
	var found *Position
	err := a.c.Read(ctx, a.c.Names.Events, span, func(r *kgo.Record) bool {
		if string(r.Key) == s.ID && replayOf(r) == replay {
			found = &Position{Partition: r.Partition, Offset: r.Offset}
		}
		return found == nil
	}, nil)
	if _, ok := errors.AsType[*topics.NoPartitionError](err); ok {
		return nil, nil // no such partition: the topics were recreated
	}
	return found, err
}

// replayOf is an events record's hs-replay header, empty on a first
// emission.
func replayOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == topics.HeaderReplay {
			return string(h.Value)
		}
	}
	return ""
}

// forward asks the processor that owns partition for the story who may
// read, and relays its answer once its signature is verified.
func (a *StoryQuery) forward(ctx context.Context, c *echo.Context, partition int32, key string, who admin.Identity) error {
	if a.peer == nil {
		return errNoPeerKey(partition)
	}
	addr, err := a.owner(ctx, c, partition)
	if err != nil {
		return err
	}
	status, body, err := a.peer.ask(ctx, addr, peerQuery(key, who))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadGateway, fmt.Sprintf("the owner of partition %d (%s) %v", partition, addr, err))
	}
	c.Response().Header().Set(headerServedBy, addr)
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// owner is the admin address of the processor group member assigned
// ingest partition p, unless that address leads back to this instance;
// c, when not nil, is told when to try again.
func (a *StoryQuery) owner(ctx context.Context, c *echo.Context, p int32) (string, error) {
	group := string(a.c.Names.ProcessorGroup())
	described, err := a.c.Admin().DescribeGroups(ctx, group)
	if err == nil {
		err = described.Error()
	}
	if err != nil {
		return "", fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, m := range described[group].Members {
		assigned, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range assigned.Topics {
			if t.Topic != string(a.c.Names.Ingest) || !slices.Contains(t.Partitions, p) {
				continue
			}
			if a.local != nil && m.InstanceID != nil && *m.InstanceID == a.local.InstanceID() {
				if c != nil {
					c.Response().Header().Set("Retry-After", "5")
				}
				return "", echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d is being assigned to this instance; try again shortly", p))
			}
			addr, ok := processorAddr(m.ClientID, m.ClientHost)
			switch {
			case !ok:
				return "", echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d is owned by processor %s, which advertises no admin listener", p, m.ClientID))
			case a.reachesSelf(addr):
				return "", echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("partition %d is owned by a processor on another host that advertises %s, which leads back to this instance: set HOOKSTREAM_ADMIN_ADVERTISED_ADDR on every instance to an address the others reach", p, addr))
			}
			return addr, nil
		}
	}
	return "", echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("no processor owns partition %d right now; is one running?", p))
}

// processorAddr is the admin listener a processor group member
// advertises in its client id (topics.MemberAdminAddr).
func processorAddr(clientID, clientHost string) (string, bool) {
	role, addr, ok := topics.MemberAdminAddr(clientID, clientHost)
	return addr, ok && role == topics.RoleProcessor
}

// reachesSelf reports whether addr, another member's advertised admin
// address, leads back to this instance: it is this instance's own, or a
// loopback address on the port of a listener on loopback or on every
// interface. Instances on several hosts with the default loopback
// listener all advertise the same address.
func (a *StoryQuery) reachesSelf(addr string) bool {
	if addr == a.advertised {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	lhost, lport, lerr := net.SplitHostPort(a.listener)
	if err != nil || lerr != nil || port != lport || !admin.LoopbackHost(host) {
		return false
	}
	ip, err := netip.ParseAddr(lhost)
	return lhost == "" || err == nil && ip.IsUnspecified() || admin.LoopbackHost(lhost)
}
