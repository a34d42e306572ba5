// Package topics owns hookstream's Kafka vocabulary: typed topic and group
// names derived from one prefix (and the names they are made of,
// ValidName), the record header keys, the codec of every record hookstream
// writes (IngestRecord, Envelope, DeadLetter, Retry, Attempt, Operational)
// with its size on the wire (RecordBytes, Fit), the check of every JSON
// body it embeds (CheckJSON), the topic specs (partitions and configs)
// with their idempotent creation, the two ways of reading its topics (a
// Follower from their start, Read and ReadRanges over offset or time
// ranges), and the embedded development broker. It imports nothing else
// of hookstream and holds no business logic.
package topics

import "strings"

// Topic is a Kafka topic name.
type Topic string

// Group is a Kafka consumer group id.
type Group string

// Names are the topic, group and transactional-id names of one deployment.
type Names struct {
	Prefix        string
	Ingest        Topic // raw webhooks, key <source>:<event-id>
	Events        Topic // processed envelopes
	DLQ           Topic // records the processor could not process
	Changelog     Topic // dedup state, compacted
	Subscriptions Topic // subscriptions, compacted
	DeliveryRetry Topic // failed deliveries awaiting their retry
	DeliveryDLQ   Topic // deliveries that exhausted their attempts
	// DeliveryAttempts holds every delivery attempt, keyed by event and
	// co-partitioned with Ingest and Events.
	DeliveryAttempts Topic
	Access           Topic // access tokens as digests, compacted
	Audit            Topic // the audit trail: every change and refusal
}

// NewNames derives every name from prefix.
func NewNames(prefix string) Names {
	return Names{
		Prefix:           prefix,
		Ingest:           Topic(prefix + ".ingest"),
		Events:           Topic(prefix + ".events"),
		DLQ:              Topic(prefix + ".dlq"),
		Changelog:        Topic(prefix + ".dedup-changelog"),
		Subscriptions:    Topic(prefix + ".subscriptions"),
		DeliveryRetry:    Topic(prefix + ".delivery-retry"),
		DeliveryDLQ:      Topic(prefix + ".delivery-dlq"),
		DeliveryAttempts: Topic(prefix + ".delivery-attempts"),
		Access:           Topic(prefix + ".access"),
		Audit:            Topic(prefix + ".audit"),
	}
}

// ValidName reports whether name may be used as a source name, a topic
// prefix or an instance id: 1 to 100 letters, digits, '.', '_' or '-', as
// Kafka topic names allow.
func ValidName(name string) bool {
	if name == "" || len(name) > 100 {
		return false
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}

// ProcessorGroup is the processors' consumer group, also the prefix of
// their transactional ids.
func (n Names) ProcessorGroup() Group { return Group(n.Prefix + "-processor") }

// RetryGroup is the delivery retry consumer's group.
func (n Names) RetryGroup() Group { return Group(n.Prefix + "-retry") }

// DispatchGroup is the dispatchers' consumer group: it shares the events
// partitions among them and commits nothing.
func (n Names) DispatchGroup() Group { return Group(n.Prefix + "-dispatch") }

// SubscriptionGroup is the consumer group of one subscription: its
// committed offsets are the subscription's cursor, committed by the
// dispatchers, the group having no members.
func (n Names) SubscriptionGroup(id string) Group { return Group(n.Prefix + "-sub-" + id) }

// TopicWriter is the transactional id of a dispatcher's writes to topic
// subscriptions' topics: <prefix>-dispatch-<instance>, instance the
// dispatcher's stable identity (a restart fences its predecessor's open
// transaction at once) or, without one, an id of its own per start. It
// shares no id with the processors (<prefix>-processor-*), the
// subscriptions writer or the redrives (<prefix>-redrive-*).
func (n Names) TopicWriter(instance string) string { return n.Prefix + "-dispatch-" + instance }

// Reserved reports whether name may not be a topic subscription's topic:
// one of hookstream's own (anything under <prefix>., Kafka taking '_' and
// '.' for the same in metric names) or Kafka's internal ones (__*).
func (n Names) Reserved(name string) bool {
	dotted := func(s string) string { return strings.ReplaceAll(s, "_", ".") }
	return strings.HasPrefix(name, "__") || dotted(name) == dotted(n.Prefix) || strings.HasPrefix(dotted(name), dotted(n.Prefix)+".")
}

// SubscriptionsWriter is the transactional id every writer of the
// subscriptions topic shares: each write fences the one before, so
// read-modify-writes never interleave.
func (n Names) SubscriptionsWriter() string { return n.Prefix + "-subscriptions-writer" }

// AccessWriter is the transactional id every writer of the access topic
// shares: each write fences the one before, so read-check-writes (the
// token limit) never interleave.
func (n Names) AccessWriter() string { return n.Prefix + "-access-writer" }

// Record header keys.
const (
	HeaderSource      = "hs-source"
	HeaderEventID     = "hs-event-id"
	HeaderEventType   = "hs-event-type"
	HeaderReceivedAt  = "hs-received-at"
	HeaderRequestID   = "hs-request-id"
	HeaderContentType = "hs-content-type"
	// HeaderProviderPrefix precedes a lowercased provider header name.
	HeaderProviderPrefix = "hs-h-"

	HeaderError         = "hs-error"
	HeaderErrorStage    = "hs-error-stage"
	HeaderOrigTopic     = "hs-orig-topic"
	HeaderOrigPartition = "hs-orig-partition"
	HeaderOrigOffset    = "hs-orig-offset"
	HeaderFailedAt      = "hs-failed-at"
	HeaderSubscription  = "hs-subscription"
	HeaderAttempts      = "hs-attempts"
	HeaderLastStatus    = "hs-last-status"
	HeaderDueAt         = "hs-due-at"
	// HeaderRedrivenFrom names the dead letter a redriven record copies,
	// <dlq topic>/<partition>/<offset>; events records carry it on.
	HeaderRedrivenFrom = "hs-redriven-from"
	// HeaderReplay marks an events record that re-emits an event: how many
	// times it was emitted again after its first emission.
	HeaderReplay = "hs-replay"
	// HeaderBatchID is the webhook-id of the batch a retry carries whole,
	// or a delivery dead letter was part of.
	HeaderBatchID = "hs-batch-id"
	// HeaderResend marks a retry record an operator's resend wrote: its
	// attempts start again at 1 and are recorded as a resend's.
	HeaderResend = "hs-resend"
	// HeaderTruncated marks a record cut to fit the record size limit; its
	// value is the original size of the record's value in bytes.
	HeaderTruncated = "hs-truncated"
	// HeaderViolations marks an ingest record whose payload does not match
	// its source's JSON Schema (validate with on_invalid: dlq): a JSON array
	// of Violation. The processor dead-letters such a record with
	// StageValidate instead of emitting it.
	HeaderViolations = "hs-violations"
	// HeaderTraceparent and HeaderTracestate carry the W3C Trace Context
	// of the span that wrote the record: the receiver's on an ingest
	// record, the processor's on an events record; a retry record carries
	// its events record's.
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Violation is one way a payload fails its source's JSON Schema: where, as
// a JSON Pointer into the payload ("" for the whole of it), and what.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// isOwnHeader reports whether key is one of hookstream's own header keys
// (provider headers, hs-h-*, are not).
func isOwnHeader(key string) bool {
	switch key {
	case HeaderSource, HeaderEventID, HeaderEventType, HeaderReceivedAt, HeaderRequestID, HeaderContentType,
		HeaderError, HeaderErrorStage, HeaderOrigTopic, HeaderOrigPartition, HeaderOrigOffset, HeaderFailedAt,
		HeaderSubscription, HeaderAttempts, HeaderLastStatus, HeaderDueAt, HeaderRedrivenFrom, HeaderReplay, HeaderTruncated, HeaderBatchID,
		HeaderResend, HeaderViolations, HeaderTraceparent, HeaderTracestate:
		return true
	}
	return false
}

// Error stages of hs-error-stage.
const (
	StageDecode  = "decode"
	StageProcess = "process"
	StageDeliver = "deliver"
	// StageValidate: the payload did not match its source's JSON Schema.
	StageValidate = "validate"
	// StageTransform: a subscription's transform failed for the event,
	// which was dead-lettered for that subscription without an attempt.
	StageTransform = "transform"
)

// TimeFormat is RFC 3339 in UTC with nanoseconds, as in hs-received-at.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"
