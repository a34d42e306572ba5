package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/topics"
)

// Mount serves the subscription endpoints on srv's /api: list, create,
// get, patch, delete, rotate a secret, each with its delivery totals and
// its health as srv's dispatcher tells it, a subscription's attempts, and
// its test. A team token is confined to its team's subscriptions (mine):
// another's is not found, as an unknown one.
func (s *Service) Mount(srv *admin.Server) {
	s.readiness = srv.Readiness
	g := srv.API()
	g.GET("/subscriptions", s.listSubscriptions, admin.ReadersAndTeams...)
	g.POST("/subscriptions", s.createSubscription, admin.AdminsAndTeams...).Changes("subscription.create")
	g.GET("/subscriptions/:id", s.getSubscription, admin.ReadersAndTeams...)
	// Operators may enable and disable (patchSubscription).
	g.PATCH("/subscriptions/:id", s.patchSubscription, admin.OperatorsAndTeams...).Changes("subscription.update")
	g.DELETE("/subscriptions/:id", s.deleteSubscription, admin.AdminsAndTeams...).Changes("subscription.delete")
	g.POST("/subscriptions/:id/rotate-secret", s.rotateSecret, admin.AdminsAndTeams...).Changes("subscription.rotate")
	// An attempt's error quotes the subscriber's answer.
	g.GET("/subscriptions/:id/attempts", s.listAttempts, admin.OperatorsAndTeams...)
	g.POST("/subscriptions/:id/test", s.testSubscription, admin.OperatorsAndTeams...)
}

// mine reports whether the caller of c may see and manage sub: any caller
// but a team token, and a team token its team's.
func mine(c *echo.Context, sub Subscription) bool {
	id := admin.Caller(c)
	return id.Role != admin.Team || sub.Team == id.Team
}

// getMine is Get, a subscription not mine not found.
func (s *Service) getMine(ctx context.Context, c *echo.Context, id string) (Subscription, error) {
	sub, err := s.Get(ctx, id)
	if err == nil && !mine(c, sub) {
		return Subscription{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return sub, err
}

// errOtherTeam refuses a team token a subscription of another team.
var errOtherTeam = echo.NewHTTPError(http.StatusForbidden, "a team token manages its own team's subscriptions only: team must be its team")

// subscriptionView is a subscription as the API lists it: secrets and
// header values redacted (only the answers to the POSTs that create it
// or rotate its secret show them), with its delivery totals from the
// attempts topic and its health.
type subscriptionView struct {
	Shown
	// Kind is the subscription's kind (Subscription.Kind).
	Kind string `json:"kind"`
	attempts.Totals
	Health Health `json:"health"`
}

// view is the API form of sub, its totals read once the tally caught up,
// its health as d tells it (known: this instance runs a dispatcher); for
// a caller who may not read bodies (a viewer), without the error of its
// last failure, which quotes the subscriber's answer.
func (s *Service) view(c *echo.Context, sub Subscription, d Delivery, known bool) subscriptionView {
	v := subscriptionView{Shown: Show(sub.Redacted()), Kind: sub.Kind(), Totals: s.attempts.Totals(sub.ID), Health: d.Health(sub, known)}
	if v.LastFailure != nil && !admin.Caller(c).In(admin.OperatorsAndTeams) {
		f := *v.LastFailure
		f.Error = ""
		v.LastFailure = &f
	}
	return v
}

// delivery is what this instance's dispatcher says of the subscriptions.
func (s *Service) delivery(ctx context.Context) (Delivery, bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return DeliveryOf(s.readiness(ctx))
}

// catchUp waits until the tally has read every attempt written so far.
func (s *Service) catchUp(ctx context.Context) error {
	if err := s.attempts.CatchUp(ctx); err != nil {
		return admin.Error(err)
	}
	return nil
}

func (s *Service) listSubscriptions(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	subs, err := s.List(ctx)
	if err != nil {
		return admin.Error(err)
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	d, known := s.delivery(ctx)
	out := make([]subscriptionView, 0, len(subs))
	for _, sub := range subs {
		if mine(c, sub) {
			out = append(out, s.view(c, sub, d, known))
		}
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Service) getSubscription(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	sub, err := s.getMine(ctx, c, c.Param("id"))
	if err != nil {
		return admin.Error(err)
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	d, known := s.delivery(ctx)
	return c.JSON(http.StatusOK, s.view(c, sub, d, known))
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

func (s *Service) createSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	pull := in.Pull != nil && *in.Pull
	if in.URL == nil && in.Topic == nil && !pull {
		return echo.NewHTTPError(http.StatusBadRequest, "url, topic or pull: required")
	}
	sub := Subscription{Pull: pull}
	if in.ID != nil {
		sub.ID = *in.ID
	}
	in.Apply(&sub)
	if caller := admin.Caller(c); caller.Role == admin.Team {
		if in.Team != nil && *in.Team != caller.Team {
			return errOtherTeam
		}
		sub.Team = caller.Team
	}
	from := ""
	if in.From != nil {
		from = *in.From
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	err = s.Create(ctx, &sub, from)
	admin.SetTarget(c, sub.ID)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusCreated, Show(sub)) // the secret, once
}

func (s *Service) patchSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	if in.ID != nil || in.From != nil || in.Pull != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "id, from and pull cannot be changed")
	}
	// Enabling and disabling is an operator's; any other change an admin's
	// (or, of its own subscriptions, a team's).
	toggle := in.Enabled != nil && slices.Equal(admin.Fields(c), []string{"enabled"})
	switch {
	case toggle && *in.Enabled:
		admin.SetAction(c, "subscription.enable")
	case toggle:
		admin.SetAction(c, "subscription.disable")
	case admin.Caller(c).Role == admin.Operator:
		return echo.NewHTTPError(http.StatusForbidden, "PATCH /api/subscriptions/:id of fields other than enabled needs role admin")
	}
	return s.update(c, func(sub *Subscription) { in.Apply(sub) }, false)
}

func (s *Service) rotateSecret(c *echo.Context) error {
	var body struct {
		Secret string `json:"secret"`
	}
	if c.Request().ContentLength > 0 {
		if err := admin.DecodeJSON(c, &body, 4<<10); err != nil {
			return err
		}
	}
	return s.update(c, func(sub *Subscription) { sub.Rotate(body.Secret, time.Now().UTC()) }, true)
}

// update edits one subscription in the registry's read-modify-write.
func (s *Service) update(c *echo.Context, edit func(*Subscription), withSecret bool) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	id := c.Param("id")
	sub, err := s.Update(ctx, id, func(sub *Subscription) error {
		if !mine(c, *sub) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		edit(sub)
		if !mine(c, *sub) {
			return errOtherTeam
		}
		return nil
	})
	if err != nil {
		return admin.Error(err)
	}
	if !withSecret {
		sub = sub.Redacted()
	}
	return c.JSON(http.StatusOK, Show(sub))
}

func (s *Service) deleteSubscription(c *echo.Context) error {
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if _, err := s.getMine(ctx, c, c.Param("id")); err != nil {
		return admin.Error(err)
	}
	if err := s.Delete(ctx, c.Param("id")); err != nil {
		return admin.Error(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// listAttempts lists a subscription's attempts from the attempts topic,
// newest first.
func (s *Service) listAttempts(c *echo.Context) error {
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
	if _, err := s.getMine(ctx, c, q.Subscription); err != nil {
		return admin.Error(err)
	}
	out, err := s.Attempts(ctx, q)
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
func (s *Service) testSubscription(c *echo.Context) error {
	var in struct {
		Event    string          `json:"event"`
		Envelope json.RawMessage `json:"envelope"`
	}
	if err := admin.DecodeJSONStrict(c, &in, MaxTestEnvelope+4<<10); err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	if _, err := s.getMine(ctx, c, c.Param("id")); err != nil {
		return admin.Error(err)
	}
	t, err := s.Test(ctx, c.Param("id"), in.Event, in.Envelope)
	if errors.Is(err, topics.ErrEventNotFound) {
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	}
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, t.Redacted)
}
