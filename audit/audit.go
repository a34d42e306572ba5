// Package audit owns the audit trail, <prefix>.audit: one record
// (admin.Record) for every change made through the admin API and every
// request it refused, written before the request ends (its handler has
// answered), and for every change a hookstream command wrote to the
// topics itself, as actor cli:<user>@<host> (worth what the topics' Kafka
// ACLs are worth: whoever may write them may write any actor); read back
// by GET /api/audit and hookstream audit with a cursor. The topic has one
// partition, so the trail is one ordered log and its offset the cursor;
// it is kept HOOKSTREAM_AUDIT_RETENTION (90 days by default).
//
// What is recorded is the admin package's to say (the routes that change
// something name their action; the guard and the authorizer report
// refusals); this package bounds and keeps it. A record holds no secret,
// header value, token or body, only the names of the fields a change
// set, and never outgrows MaxRecordBytes: a long target is cut, with a
// marker, and at most 64 field names are kept. Refusals are recorded at
// most 10 a second per instance, counted beyond
// (hookstream_audit_refusals_dropped_total), so a flood of bad tokens
// cannot flood the trail.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Bounds of a record.
const (
	// MaxRecordBytes bounds an encoded record: far below the topic's
	// max.message.bytes, whatever the body limit.
	MaxRecordBytes = 16 << 10
	// maxTarget bounds a target (a path, a group name) before the marker.
	maxTarget = 512
	// maxFields bounds the field names kept, and maxField each name.
	maxFields, maxField = 64, 64
	// maxRemote bounds a remote address.
	maxRemote = 64
	// maxActor bounds an actor's name: a CLI's, cli:<user>@<host>, is
	// its machine's to choose.
	maxActor = 128
	// MaxRefusalsPerSecond bounds the refusals an instance records.
	MaxRefusalsPerSecond = 10
)

// truncated ends a target that was cut.
const truncated = "…(truncated)"

// Service keeps and reads the audit trail of a deployment.
type Service struct {
	c       topics.Cluster
	log     *slog.Logger
	dropped prometheus.Counter
	now     func() time.Time

	// refusals admits the refusals recorded: 10 at once, 10 a second
	// after (MaxRefusalsPerSecond), in any span of time.
	refusals *rate.Limiter
}

// refusalLimiter admits MaxRefusalsPerSecond refusals at once, and as
// many a second after.
func refusalLimiter() *rate.Limiter {
	return rate.NewLimiter(MaxRefusalsPerSecond, MaxRefusalsPerSecond)
}

// New builds the service over c; it writes with c's shared client. It
// does no I/O.
func New(c topics.Cluster, log *slog.Logger, reg prometheus.Registerer) *Service {
	s := &Service{c: c, log: log.With("component", "audit"), now: time.Now, refusals: refusalLimiter(),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_audit_refusals_dropped_total",
			Help: "Refused admin API requests not recorded in the audit trail: past 10 a second per instance.",
		})}
	reg.MustRegister(s.dropped)
	return s
}

// writeTimeout bounds the write of one record.
const writeTimeout = 5 * time.Second

// Record writes r to the trail, bounded (bound), and waits for the
// write: a request that changed something ends once its record is
// kept. A refusal
// past MaxRefusalsPerSecond is counted instead. A record that cannot be
// written is logged: the change it records is made.
func (s *Service) Record(ctx context.Context, r admin.Record) {
	if r.Action == admin.ActionRefused && !s.admit() {
		s.dropped.Inc()
		return
	}
	v, err := json.Marshal(bound(r))
	if err != nil {
		s.log.Error("audit record not encoded", "action", r.Action, "err", err)
		return
	}
	// The record is written even when the client has gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	rec := &kgo.Record{Topic: string(s.c.Names.Audit), Value: v, Timestamp: r.At}
	if err := s.c.Client.ProduceSync(ctx, rec).FirstErr(); err != nil {
		s.log.Error("audit record not written", "action", r.Action, "target", fmt.Sprintf("%.128s", r.Target),
			"request_id", r.RequestID, "err", err)
	}
}

// admit reports whether one more refusal may be recorded now.
func (s *Service) admit() bool { return s.refusals.AllowN(s.now(), 1) }

// bound cuts what a caller chose the length of: the target (a path) to
// maxTarget bytes and a marker, the field names to maxFields of at most
// maxField bytes and a count of the rest, the remote address, the actor's
// name (a CLI's). Names and teams of tokens are bounded when the token is
// made.
func bound(r admin.Record) admin.Record {
	r.Target = cut(r.Target, maxTarget)
	r.RemoteAddr = cut(r.RemoteAddr, maxRemote)
	r.Actor.Name = cut(r.Actor.Name, maxActor)
	if len(r.Fields) > 0 {
		fields := make([]string, 0, min(len(r.Fields), maxFields)+1)
		for _, f := range r.Fields[:min(len(r.Fields), maxFields)] {
			fields = append(fields, cut(f, maxField))
		}
		if rest := len(r.Fields) - maxFields; rest > 0 {
			fields = append(fields, fmt.Sprintf("(and %d more)", rest))
		}
		r.Fields = fields
	}
	return r
}

// cut is s cut to n bytes and the marker, when longer, on a rune
// boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncated
}
