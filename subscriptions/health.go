package subscriptions

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/hookstream/hookstream/admin"
)

// Health states of a subscription, as the API, the CLI and the console
// show them.
const (
	HealthDelivering  = "delivering"
	HealthFailing     = "failing"
	HealthCircuitOpen = "circuit open"
	HealthThrottled   = "throttled"
	HealthDisabled    = "disabled"
	// HealthUnknown: the instance asked runs no dispatcher.
	HealthUnknown = "unknown"
)

// FailingAfter is how many outcomes in a row, failed attempts or events
// its transform dead-lettered, make a subscription failing; its first
// success clears it.
const FailingAfter = 3

// Failing is a subscription's run of failures as its dispatcher saw it.
type Failing struct {
	// Reason is the last failure's: "401 Unauthorized", "host does not
	// resolve", "transform error: ...".
	Reason string `json:"reason"`
	// Since is when the first failure of the run happened.
	Since time.Time `json:"since"`
	// Failures counts the run: FailingAfter at least.
	Failures int `json:"failures"`
}

// Delivery is what a dispatcher says of its subscriptions in the detail
// of its readiness check ("dispatcher").
type Delivery struct {
	OpenCircuits []string `json:"open_circuits"`
	// Throttled are the subscriptions whose filter and transform spent
	// their share of the dispatcher's CPU within the last minute.
	Throttled []string `json:"throttled"`
	// Failing are the failing subscriptions, by id.
	Failing map[string]Failing `json:"failing"`
}

// DeliveryOf reads the dispatcher's detail in r; false when the instance
// runs no dispatcher.
func DeliveryOf(r admin.Readiness) (Delivery, bool) {
	c, ok := r.Checks["dispatcher"]
	if !ok {
		return Delivery{}, false
	}
	var d Delivery
	if b, err := json.Marshal(c.Detail); err == nil {
		_ = json.Unmarshal(b, &d) // a detail without these fields leaves them empty
	}
	return d, true
}

// Health is a subscription's state and why.
type Health struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Since is when a failing subscription began to fail.
	Since time.Time `json:"since,omitzero"`
}

// Health is s's health as d tells it; known false when no dispatcher
// told (only a disabled subscription's is known then).
func (d Delivery) Health(s Subscription, known bool) Health {
	f, failing := d.Failing[s.ID]
	switch {
	case !s.Enabled:
		return Health{State: HealthDisabled, Reason: s.DisabledReason}
	case !known:
		return Health{State: HealthUnknown, Reason: "this instance runs no dispatcher"}
	case slices.Contains(d.OpenCircuits, s.ID):
		return Health{State: HealthCircuitOpen, Reason: f.Reason}
	case failing:
		return Health{State: HealthFailing, Reason: f.Reason, Since: f.Since}
	case slices.Contains(d.Throttled, s.ID):
		return Health{State: HealthThrottled}
	}
	return Health{State: HealthDelivering}
}
