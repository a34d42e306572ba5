package subscriptions

import (
	"context"
	"time"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
)

// Service is the subscriptions as operators manage them: the registry's
// reads and writes, each subscription's delivery totals and attempts, and
// the test of what it would send. Its methods are what the admin API
// (Mount), the console and the commands call.
type Service struct {
	*Registry
	// attempts follows the delivery attempts: the subscriptions' totals.
	attempts  *attempts.Tally
	userAgent string
	// readiness is the readiness of the admin server Mount serves on:
	// its dispatcher's detail tells the subscriptions' health.
	readiness func(context.Context) admin.Readiness
}

// New is the service of registry's subscriptions, over its cluster:
// tally follows the delivery attempts (nil for a service that shows no
// totals), userAgent is the deliveries' User-Agent, which a test shows.
// It does no I/O.
func New(registry *Registry, tally *attempts.Tally, userAgent string) *Service {
	return &Service{Registry: registry, attempts: tally, userAgent: userAgent}
}

// Attempts returns the attempts q selects from the attempts topic, newest
// first (attempts.List).
func (s *Service) Attempts(ctx context.Context, q attempts.Query) ([]attempts.Attempt, error) {
	return attempts.List(ctx, s.c, q)
}

// Tested is what a subscription would send for one event, sent nowhere.
type Tested struct {
	Subscription Subscription
	// Preview is what would be sent; Redacted hides the values of the
	// subscription's own headers in it, as every answer but the one
	// that set them hides them (Compiled.Redact).
	Preview, Redacted Preview
}

// Test is what subscription id would send, now, for the event key names
// or envelope holds, one of the two (TestEvent, Compiled.Preview):
// nothing is delivered.
func (s *Service) Test(ctx context.Context, id, key string, envelope []byte) (Tested, error) {
	sub, err := s.Get(ctx, id)
	if err != nil {
		return Tested{}, err
	}
	e, err := TestEvent(ctx, s.c, key, envelope)
	if err != nil {
		return Tested{}, err
	}
	c := Compile(sub)
	p := c.Preview(e, time.Now(), s.userAgent)
	return Tested{Subscription: sub, Preview: p, Redacted: c.Redact(p)}, nil
}

// Shown is a subscription as the API and the CLI show it: a pull
// subscription's secret is its pull token, and named so (pull_token,
// previous_pull_token, previous_pull_token_until, never secret); a
// webhook's is its secret. The fields of a delivery to a URL (url,
// headers, ordered, max_in_flight, rate_limit, batch_max, batch_wait,
// schedule, timeout) are a webhook's only: a pull or topic subscription
// has none of them, whatever its record holds.
type Shown struct {
	Subscription
	// Ordered, MaxInFlight and BatchMax show the Subscription's, which
	// its record always writes, for a webhook; nil for the other kinds.
	Ordered     *bool `json:"ordered,omitempty"`
	MaxInFlight *int  `json:"max_in_flight,omitempty"`
	BatchMax    *int  `json:"batch_max,omitempty"`

	PullToken              string    `json:"pull_token,omitempty"`
	PreviousPullToken      string    `json:"previous_pull_token,omitempty"`
	PreviousPullTokenUntil time.Time `json:"previous_pull_token_until,omitzero"`
}

// Show is s as the API and the CLI show it.
func Show(s Subscription) Shown {
	if s.Kind() == KindWebhook {
		return Shown{Subscription: s, Ordered: &s.Ordered, MaxInFlight: &s.MaxInFlight, BatchMax: &s.BatchMax}
	}
	s.URL, s.Headers, s.RateLimit, s.BatchWait, s.Schedule, s.Timeout = "", nil, 0, 0, nil, 0
	if s.Kind() == KindTopic {
		return Shown{Subscription: s}
	}
	sh := Shown{PullToken: s.Secret, PreviousPullToken: s.PreviousSecret, PreviousPullTokenUntil: s.PreviousSecretUntil}
	s.Secret, s.PreviousSecret, s.PreviousSecretUntil = "", "", time.Time{}
	sh.Subscription = s
	return sh
}
