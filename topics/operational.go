package topics

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// OperationalSource is the source of hookstream's own operational events.
// Only subscriptions that name it in their sources receive them.
const OperationalSource = "hookstream"

// Operational event types.
const (
	OpSubscriptionDisabled = "subscription.disabled"
	OpSubscriptionEnabled  = "subscription.enabled"
	OpDeliveryDeadLettered = "delivery.dead_lettered"
	OpEventDeadLettered    = "event.dead_lettered"
	OpCircuitOpened        = "circuit.opened"
	OpCircuitClosed        = "circuit.closed"
)

// Operational is an operational event: something hookstream did that an
// operator wants to hear of. Its JSON is the data of the event's envelope;
// fields that do not apply to its type are left out.
type Operational struct {
	Type string `json:"-"`
	// SubscriptionID is the subscription the event is about; it never
	// receives the event.
	SubscriptionID string `json:"subscription_id,omitempty"`
	// Reason says why a subscription was disabled.
	Reason string `json:"reason,omitempty"`
	// Event is the <source>:<event-id> of the dead-lettered event.
	Event string `json:"event,omitempty"`
	// Stage is the hs-error-stage of a processor dead letter.
	Stage string `json:"stage,omitempty"`
	// Attempts and LastStatus are a delivery dead letter's attempts and
	// the subscriber's last HTTP status (0: no answer).
	Attempts   int `json:"attempts,omitempty"`
	LastStatus int `json:"last_status,omitempty"`
	// Error is the last error.
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
}

// IngestRecord is the event as an ingest record of source
// OperationalSource. Its event id is derived from the type and facts, the
// parts that identify this occurrence: whoever writes the same occurrence
// again (a retried write, another instance) writes the same key, and the
// processor's deduplication keeps one.
func (o *Operational) IngestRecord(facts ...string) *IngestRecord {
	body, _ := json.Marshal(o) // strings, ints and a time: cannot fail
	h := sha256.New()
	h.Write([]byte(o.Type))
	for _, f := range facts {
		h.Write([]byte{0})
		h.Write([]byte(f))
	}
	return &IngestRecord{
		Source:      OperationalSource,
		EventID:     o.Type + "-" + hex.EncodeToString(h.Sum(nil)[:16]),
		EventType:   o.Type,
		ReceivedAt:  o.At,
		ContentType: "application/json",
		Body:        body,
	}
}

// OperationalSubject is the subscription an events record is about when
// it is an operational event; empty otherwise.
func OperationalSubject(r *kgo.Record) string {
	if source, _ := EventSourceType(r); source != OperationalSource {
		return ""
	}
	return gjson.GetBytes(r.Value, "data.subscription_id").String()
}
