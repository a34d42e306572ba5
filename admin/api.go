package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// API is what /api serves from.
type API struct {
	// Registry reads and writes subscriptions.
	Registry *subscriptions.Registry
	// Attempts follows the delivery attempts: the subscriptions' totals
	// and the delivery counts of /api/stats.
	Attempts *attempts.Tally
	// Stats follows the ingest, events and DLQ topics: the event counts
	// of /api/stats.
	Stats *stats.Tally
	// Rejected, when this process runs the ingest role, is its receiver's
	// rejected requests per source (ingest.Handler.Rejected), for
	// /api/stats.
	Rejected func() map[string]int64
	// Kafka answers lag and dead-letter queries; Opts build its readers.
	Kafka *kgo.Client
	Opts  []kgo.Opt
	Names topics.Names
}

// MountAPI serves the subscription and stats endpoints under /api.
func (s *Server) MountAPI(api API) {
	g := s.api
	g.GET("/stats", api.stats)
	g.GET("/subscriptions", api.listSubscriptions)
	g.POST("/subscriptions", api.createSubscription)
	g.GET("/subscriptions/:id", api.getSubscription)
	g.PATCH("/subscriptions/:id", api.patchSubscription)
	g.DELETE("/subscriptions/:id", api.deleteSubscription)
	g.POST("/subscriptions/:id/rotate-secret", api.rotateSecret)
	g.GET("/subscriptions/:id/attempts", api.attempts)
	g.GET("/dlq", api.listDLQ)
	g.POST("/dlq/redrive", api.redrive)
}

// apiError maps registry and validation errors to statuses.
func apiError(err error) error {
	switch {
	case errors.Is(err, subscriptions.ErrNotFound):
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	case errors.Is(err, subscriptions.ErrExists), errors.Is(err, subscriptions.ErrConflict), errors.Is(err, subscriptions.ErrLimit):
		return echo.NewHTTPError(http.StatusConflict, err.Error())
	case errors.Is(err, subscriptions.ErrInvalid):
		return echo.NewHTTPError(http.StatusBadRequest, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return Error(err)
}

// subscriptionView is a subscription as the API shows it: secrets
// redacted, with its delivery totals from the attempts topic.
type subscriptionView struct {
	subscriptions.Subscription
	attempts.Totals
}

// view is the API form of s, its totals read once the tally caught up.
func (a API) view(s subscriptions.Subscription) subscriptionView {
	return subscriptionView{Subscription: s.Redacted(), Totals: a.Attempts.Totals(s.ID)}
}

// catchUp waits until the tally has read every attempt written so far.
func (a API) catchUp(ctx context.Context) error {
	if err := a.Attempts.CatchUp(ctx, a.Kafka); err != nil {
		return apiError(err)
	}
	return nil
}

func (a API) listSubscriptions(c *echo.Context) error {
	ctx, cancel := Timeout(c)
	defer cancel()
	subs, err := a.Registry.List(ctx)
	if err != nil {
		return apiError(err)
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
	ctx, cancel := Timeout(c)
	defer cancel()
	s, err := a.Registry.Get(ctx, c.Param("id"))
	if err != nil {
		return apiError(err)
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
	subscriptions.Patch
}

func decode(c *echo.Context) (subscriptionInput, error) {
	var in subscriptionInput
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, echo.NewHTTPError(http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	if err := in.Patch.Validate(); err != nil {
		return in, apiError(err)
	}
	return in, nil
}

func (a API) createSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	if in.URL == nil {
		return echo.NewHTTPError(http.StatusBadRequest, "url: required")
	}
	var s subscriptions.Subscription
	if in.ID != nil {
		s.ID = *in.ID
	}
	in.Apply(&s)
	from := ""
	if in.From != nil {
		from = *in.From
	}
	ctx, cancel := Timeout(c)
	defer cancel()
	if err := a.Registry.Create(ctx, &s, from); err != nil {
		return apiError(err)
	}
	return c.JSON(http.StatusCreated, s) // the secret, once
}

func (a API) patchSubscription(c *echo.Context) error {
	in, err := decode(c)
	if err != nil {
		return err
	}
	if in.ID != nil || in.From != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "id and from cannot be changed")
	}
	return a.update(c, func(s *subscriptions.Subscription) { in.Apply(s) }, false)
}

func (a API) rotateSecret(c *echo.Context) error {
	var body struct {
		Secret string `json:"secret"`
	}
	if c.Request().ContentLength > 0 {
		if err := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 4<<10)).Decode(&body); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON: "+err.Error())
		}
	}
	return a.update(c, func(s *subscriptions.Subscription) { s.Rotate(body.Secret, time.Now().UTC()) }, true)
}

// update edits one subscription in the registry's read-modify-write.
func (a API) update(c *echo.Context, edit func(*subscriptions.Subscription), withSecret bool) error {
	ctx, cancel := Timeout(c)
	defer cancel()
	s, err := a.Registry.Update(ctx, c.Param("id"), func(s *subscriptions.Subscription) error {
		edit(s)
		return nil
	})
	if err != nil {
		return apiError(err)
	}
	if !withSecret {
		s = s.Redacted()
	}
	return c.JSON(http.StatusOK, s)
}

func (a API) deleteSubscription(c *echo.Context) error {
	ctx, cancel := Timeout(c)
	defer cancel()
	if err := a.Registry.Delete(ctx, c.Param("id")); err != nil {
		return apiError(err)
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
	ctx, cancel := Timeout(c)
	defer cancel()
	if _, err := a.Registry.Get(ctx, q.Subscription); err != nil {
		return apiError(err)
	}
	out, err := attempts.List(ctx, a.Kafka, a.Opts, a.Names, q)
	if err != nil {
		return apiError(err)
	}
	if out == nil {
		out = []attempts.Attempt{}
	}
	return c.JSON(http.StatusOK, out)
}

// statsView is what /api/stats answers: the deployment's events per source
// from the ingest, events and DLQ topics, its deliveries from the attempts
// topic, the requests this instance's receiver rejected, and group lag.
type statsView struct {
	Accepted       int64              `json:"accepted"`
	Duplicates     int64              `json:"duplicates"`
	Processed      int64              `json:"processed"`
	Failed         int64              `json:"failed"`
	Delivered      int64              `json:"delivered"`
	DeliveryFailed int64              `json:"delivery_failed"`
	Sources        map[string]*counts `json:"sources"`
	Lag            any                `json:"lag,omitempty"`
}

type counts struct {
	Accepted   int64 `json:"accepted"`
	Duplicates int64 `json:"duplicates"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	Rejected   int64 `json:"rejected"`
}

func (a API) stats(c *echo.Context) error {
	ctx, cancel := Timeout(c)
	defer cancel()
	if err := a.catchUp(ctx); err != nil {
		return err
	}
	if err := a.Stats.CatchUp(ctx, a.Kafka); err != nil {
		return apiError(err)
	}
	out := statsView{Sources: make(map[string]*counts)}
	source := func(name string) *counts {
		if out.Sources[name] == nil {
			out.Sources[name] = new(counts)
		}
		return out.Sources[name]
	}
	for name, n := range a.Stats.Sources() {
		out.Accepted += n.Accepted
		out.Duplicates += n.Duplicates()
		out.Processed += n.Processed
		out.Failed += n.Failed
		if name != "" { // records that name no source count in the totals only
			*source(name) = counts{Accepted: n.Accepted, Duplicates: n.Duplicates(), Processed: n.Processed, Failed: n.Failed}
		}
	}
	if a.Rejected != nil {
		for name, n := range a.Rejected() {
			source(name).Rejected = n
		}
	}
	deliveries := a.Attempts.Sum()
	out.Delivered, out.DeliveryFailed = deliveries.Delivered, deliveries.DeadLettered
	lag, err := groups.Lag(ctx, a.Kafka, a.Names, "")
	if err != nil {
		return apiError(err)
	}
	subs, err := a.Registry.List(ctx)
	if err != nil {
		return apiError(err)
	}
	out.Lag = groups.WithoutDeleted(a.Names, lag, subs)
	return c.JSON(http.StatusOK, out)
}

// dlqQuery is the selection of /api/dlq and /api/dlq/redrive.
type dlqQuery struct {
	Kind  string `json:"kind"`
	Since string `json:"since"`
	Key   string `json:"key"`
	Limit int    `json:"limit"`
	All   bool   `json:"all"`
}

func (q dlqQuery) parse() (deadletter.Kind, deadletter.Filter, error) {
	kind, err := deadletter.ParseKind(cmpOr(q.Kind, "processor"))
	if err != nil {
		return "", deadletter.Filter{}, echo.NewHTTPError(http.StatusBadRequest, "kind: "+err.Error())
	}
	f := deadletter.Filter{Key: q.Key, Limit: q.Limit}
	if q.Limit < 0 || q.Limit > 10_000 {
		return "", f, echo.NewHTTPError(http.StatusBadRequest, "limit: want a number from 0 to 10000")
	}
	if q.Since != "" {
		t, err := time.Parse(time.RFC3339, q.Since)
		if err != nil {
			return "", f, echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
		f.Since = t
	}
	return kind, f, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (a API) listDLQ(c *echo.Context) error {
	limit, err := strconv.Atoi(c.QueryParamOr("limit", "100"))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "limit: want a number from 0 to 10000")
	}
	kind, f, err := dlqQuery{Kind: c.QueryParam("kind"), Since: c.QueryParam("since"), Key: c.QueryParam("key"), Limit: limit}.parse()
	if err != nil {
		return err
	}
	ctx, cancel := Timeout(c)
	defer cancel()
	letters, err := deadletter.List(ctx, a.Kafka, a.Opts, a.Names, kind, f)
	if err != nil {
		return apiError(err)
	}
	if letters == nil {
		letters = []deadletter.Letter{}
	}
	return c.JSON(http.StatusOK, letters)
}

// redrive copies the selected letters back; a selection is required.
func (a API) redrive(c *echo.Context) error {
	var q dlqQuery
	if err := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 4<<10)).Decode(&q); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	kind, f, err := q.parse()
	if err != nil {
		return err
	}
	if !q.All && q.Since == "" && q.Key == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "select letters with since, key, or all: true")
	}
	ctx, cancel := Timeout(c)
	defer cancel()
	copied, skipped, err := deadletter.Redrive(ctx, a.Kafka, a.Opts, a.Names, kind, f)
	if err != nil {
		return apiError(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"redriven": copied, "skipped": skipped, "to": kind.Target(a.Names)})
}
