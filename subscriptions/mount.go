package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/topics"
)

// API serves the subscriptions on the admin listener's /api: list,
// create, get, patch, delete, rotate a secret, each with its delivery
// totals, and a subscription's attempts, from the attempts topic.
type API struct {
	// Registry reads and writes subscriptions.
	Registry *Registry
	// Attempts follows the delivery attempts: the subscriptions' totals.
	Attempts *attempts.Tally
	// Cluster's events and attempts topics are read.
	Cluster topics.Cluster
	// UserAgent is the deliveries' User-Agent, which a test shows.
	UserAgent string
}

// Mount serves the subscription endpoints on srv's /api.
func (a API) Mount(srv *admin.Server) {
	g := srv.API()
	g.GET("/subscriptions", a.listSubscriptions)
	g.POST("/subscriptions", a.createSubscription)
	g.GET("/subscriptions/:id", a.getSubscription)
	g.PATCH("/subscriptions/:id", a.patchSubscription)
	g.DELETE("/subscriptions/:id", a.deleteSubscription)
	g.POST("/subscriptions/:id/rotate-secret", a.rotateSecret)
	g.GET("/subscriptions/:id/attempts", a.attempts)
	g.POST("/subscriptions/:id/test", a.testSubscription)
}

// Shown is a subscription as the API and the CLI show it: a pull
// subscription's secret is its pull token, and named so (pull_token,
// previous_pull_token, previous_pull_token_until, never secret); a
// webhook's is its secret.
type Shown struct {
	Subscription
	PullToken              string    `json:"pull_token,omitempty"`
	PreviousPullToken      string    `json:"previous_pull_token,omitempty"`
	PreviousPullTokenUntil time.Time `json:"previous_pull_token_until,omitzero"`
}

// Show is s as the API and the CLI show it.
func Show(s Subscription) Shown {
	if s.Kind() != KindPull {
		return Shown{Subscription: s}
	}
	sh := Shown{PullToken: s.Secret, PreviousPullToken: s.PreviousSecret, PreviousPullTokenUntil: s.PreviousSecretUntil}
	s.Secret, s.PreviousSecret, s.PreviousSecretUntil = "", "", time.Time{}
	sh.Subscription = s
	return sh
}

// subscriptionView is a subscription as the API lists it: secrets and
// header values redacted (only the answers to the POSTs that create it
// or rotate its secret show them), with its delivery totals from the
// attempts topic.
type subscriptionView struct {
	Shown
	// Kind is the subscription's kind (Subscription.Kind).
	Kind string `json:"kind"`
	attempts.Totals
}

// view is the API form of s, its totals read once the tally caught up.
func (a API) view(s Subscription) subscriptionView {
	return subscriptionView{Shown: Show(s.Redacted()), Kind: s.Kind(), Totals: a.Attempts.Totals(s.ID)}
}

// catchUp waits until the tally has read every attempt written so far.
func (a API) catchUp(ctx context.Context) error {
	if err := a.Attempts.CatchUp(ctx); err != nil {
		return admin.Error(err)
	}
	return nil
}

func (a API) listSubscriptions(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	subs, err := a.Registry.List(ctx)
	if err != nil {
		return admin.Error(err)
	}
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	out := make([]subscriptionView, 0, len(subs))
	for _, s := range subs {
		out = append(out, a.view(s))
	}
	return c.JSON(http.StatusOK, out)
}

func (a API) getSubscription(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	s, err := a.Registry.Get(ctx, c.Param("id"))
	if err != nil {
		return admin.Error(err)
	}
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, a.view(s))
}

// subscriptionInput is the writable JSON of a subscription.
type subscriptionInput struct {
	ID   *string `json:"id"`
	From *string `json:"from"`
	// Pull makes a pull subscription; a kind is not changed once created.
	Pull *bool `json:"pull"`
	Patch
}

func decode(c *echo.Context) (subscriptionInput, error) {
	var in subscriptionInput
	if err := admin.DecodeJSONStrict(c, &in, 64<<10); err != nil {
		return in, err
	}
	if err := in.Patch.Validate(); err != nil {
		return in, admin.Error(err)
	}
	return in, nil
}

func (a API) createSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	pull := in.Pull != nil && *in.Pull
	if in.URL == nil && in.Topic == nil && !pull {
		return echo.NewHTTPError(http.StatusBadRequest, "url, topic or pull: required")
	}
	s := Subscription{Pull: pull}
	if in.ID != nil {
		s.ID = *in.ID
	}
	in.Apply(&s)
	from := ""
	if in.From != nil {
		from = *in.From
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if err := a.Registry.Create(ctx, &s, from); err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusCreated, Show(s)) // the secret, once
}

func (a API) patchSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	if in.ID != nil || in.From != nil || in.Pull != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "id, from and pull cannot be changed")
	}
	return a.update(c, func(s *Subscription) { in.Apply(s) }, false)
}

func (a API) rotateSecret(c *echo.Context) error {
	var body struct {
		Secret string `json:"secret"`
	}
	if c.Request().ContentLength > 0 {
		if err := admin.DecodeJSON(c, &body, 4<<10); err != nil {
			return err
		}
	}
	return a.update(c, func(s *Subscription) { s.Rotate(body.Secret, time.Now().UTC()) }, true)
}

// update edits one subscription in the registry's read-modify-write.
func (a API) update(c *echo.Context, edit func(*Subscription), withSecret bool) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	s, err := a.Registry.Update(ctx, c.Param("id"), func(s *Subscription) error {
		edit(s)
		return nil
	})
	if err != nil {
		return admin.Error(err)
	}
	if !withSecret {
		s = s.Redacted()
	}
	return c.JSON(http.StatusOK, Show(s))
}

func (a API) deleteSubscription(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if err := a.Registry.Delete(ctx, c.Param("id")); err != nil {
		return admin.Error(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// attempts lists a subscription's attempts from the attempts topic,
// newest first.
func (a API) attempts(c *echo.Context) error {
	q := attempts.Query{Subscription: c.Param("id"), EventID: c.QueryParam("event"), Status: c.QueryParam("status")}
	var err error
	if q.Limit, err = strconv.Atoi(c.QueryParamOr("limit", "50")); err != nil || q.Limit < 1 || q.Limit > 1000 {
		return echo.NewHTTPError(http.StatusBadRequest, "limit: want a number from 1 to 1000")
	}
	if !attempts.ValidStatus(q.Status) {
		return echo.NewHTTPError(http.StatusBadRequest, "status: want delivered, failed, retrying, dead_lettered or an HTTP status")
	}
	if since := c.QueryParam("since"); since != "" {
		if q.Since, err = time.Parse(time.RFC3339, since); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if _, err := a.Registry.Get(ctx, q.Subscription); err != nil {
		return admin.Error(err)
	}
	out, err := attempts.List(ctx, a.Cluster, q)
	if err != nil {
		return admin.Error(err)
	}
	if out == nil {
		out = []attempts.Attempt{}
	}
	return c.JSON(http.StatusOK, out)
}

// testSubscription answers POST /api/subscriptions/{id}/test, body
// {"event": "SOURCE:ID"} or {"envelope": {...}}, with the Preview of the
// event for the subscription, its own headers' values hidden as every
// answer but the one that set them hides them: nothing is delivered.
func (a API) testSubscription(c *echo.Context) error {
	var in struct {
		Event    string          `json:"event"`
		Envelope json.RawMessage `json:"envelope"`
	}
	if err := admin.DecodeJSONStrict(c, &in, MaxTestEnvelope+4<<10); err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	s, err := a.Registry.Get(ctx, c.Param("id"))
	if err != nil {
		return admin.Error(err)
	}
	e, err := TestEvent(ctx, a.Cluster, in.Event, in.Envelope)
	if errors.Is(err, topics.ErrEventNotFound) {
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	}
	if err != nil {
		return admin.Error(err)
	}
	compiled := Compile(s)
	return c.JSON(http.StatusOK, compiled.Redact(compiled.Preview(e, time.Now(), a.UserAgent)))
}
