// Webhooks: the sender of the delivery sink for subscriptions with a
// URL. An attempt is one signed POST (Standard Webhooks) through the
// dispatcher's webhook.Client, whose hosts' room bounds the attempts
// waiting for each host.

package dispatch

import (
	"context"
	"net/http"
	"net/url"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/webhook"
)

// webhookSender makes webhook attempts.
type webhookSender struct{ d *Dispatcher }

func (s webhookSender) room(ctx context.Context, sub subscriptions.Subscription) (func(), error) {
	return s.d.client.Room(ctx, sub.URL)
}

// send POSTs m to sub's URL, its headers rendered and signed by c.
func (s webhookSender) send(ctx context.Context, sub subscriptions.Subscription, c *subscriptions.Compiled, m *message, n int, room func()) result {
	d := s.d
	ctx, span := d.attemptSpan(ctx, http.MethodPost, sub, m, n)
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodPost)
		if u, err := url.Parse(sub.URL); err == nil {
			span.SetAttributes(semconv.ServerAddress(u.Hostname()))
		}
	}
	var res webhook.Result
	if header, err := c.Header(m.id, m.body, d.now(), d.cfg.Client.UserAgent); err != nil {
		room()
		res = webhook.Result{Err: err}
	} else {
		res = d.client.Deliver(ctx, webhook.Delivery{URL: sub.URL, Header: header, Body: m.body, Timeout: time.Duration(sub.Timeout), Room: room})
	}
	if res.Status != 0 && span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(res.Status))
	}
	out := result{ok: res.OK(), status: res.Status, latency: res.Latency, err: res.Err, retryAfter: res.RetryAfter, gone: res.Gone()}
	endAttemptSpan(span, out)
	return out
}
