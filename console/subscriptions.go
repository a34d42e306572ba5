package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// maxAttemptsShown bounds the attempts a subscription's page lists.
const maxAttemptsShown = 100

// mountSubscriptions serves the subscription pages: the list, a
// subscription, the form of a new one, and the buttons Enable, Disable,
// Rotate secret and Delete, each through subscriptions.Registry as
// /api/subscriptions does.
func (u *Console) mountSubscriptions(g *echo.Group) {
	g.GET("/subscriptions", u.page(u.subscriptionList))
	g.GET("/subscriptions/new", u.page(u.newSubscription))
	g.POST("/subscriptions/new", u.action(u.createSubscription))
	g.GET("/subscriptions/:id", u.page(u.subscription))
	g.POST("/subscriptions/:id/enable", u.action(u.setEnabled(true)))
	g.POST("/subscriptions/:id/disable", u.action(u.setEnabled(false)))
	g.POST("/subscriptions/:id/rotate-secret", u.action(u.rotateSecret))
	g.POST("/subscriptions/:id/delete", u.action(u.deleteSubscription))
	g.POST("/subscriptions/:id/test", u.action(u.testSubscription))
}

// Health of a subscription as the console shows it.
const (
	healthDelivering  = "delivering"
	healthCircuitOpen = "circuit open"
	healthDisabled    = "disabled"
)

// subscriptionRow is a subscription in the list.
type subscriptionRow struct {
	subscriptions.Subscription
	attempts.Totals
	Health badge
	Lag    int64
	HasLag bool
}

// badge is a subscription's health and why hookstream disabled it.
type badge struct {
	Health, DisabledReason string
}

type subscriptionListData struct {
	Rows          []subscriptionRow
	LagErr        string
	CircuitsKnown bool
}

// openCircuits are the subscriptions whose circuit this instance's
// dispatcher holds open; known false when it runs none.
func (u *Console) openCircuits(ctx context.Context) (open []string, known bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d, known := detail(u.srv.Readiness(ctx), "dispatcher")
	return d.OpenCircuits, known
}

func health(s subscriptions.Subscription, open []string) badge {
	switch {
	case !s.Enabled:
		return badge{healthDisabled, s.DisabledReason}
	case slices.Contains(open, s.ID):
		return badge{Health: healthCircuitOpen}
	}
	return badge{Health: healthDelivering}
}

func (u *Console) subscriptionList(r *Request) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	subs, err := u.cfg.Registry.List(ctx)
	if err != nil {
		return subscriptionError(err)
	}
	if err := u.cfg.Attempts.CatchUp(ctx, u.cfg.Kafka); err != nil {
		return err
	}
	var out subscriptionListData
	var open []string
	open, out.CircuitsKnown = u.openCircuits(ctx)
	lags := make(map[string]int64)
	if len(subs) > 0 {
		all, err := groups.Lag(ctx, u.cfg.Kafka, u.cfg.Names, "")
		if err != nil {
			out.LagErr = err.Error()
		}
		for _, g := range all {
			if id, ok := groups.SubscriptionID(u.cfg.Names, topics.Group(g.Group)); ok {
				lags[id] = g.Total
			}
		}
	}
	for _, id := range sortedIDs(subs) {
		s := subs[id]
		lag, ok := lags[id]
		out.Rows = append(out.Rows, subscriptionRow{Subscription: s.Redacted(), Totals: u.cfg.Attempts.Totals(id),
			Health: health(s, open), Lag: lag, HasLag: ok})
	}
	return r.Render(http.StatusOK, "subscriptions.html", "Subscriptions", "subscriptions", out)
}

// subscriptionData is one subscription's page.
type subscriptionData struct {
	Sub           subscriptions.Subscription
	Totals        attempts.Totals
	Health        badge
	CircuitsKnown bool
	Lag           int64
	LagErr        string
	Attempts      []attempts.Attempt
	Status        string
	Statuses      []string
	// NoAttempts is what the page says when no attempt is listed.
	NoAttempts string
	// NewSecret is shown once, right after it was generated.
	NewSecret string
	// Test is the answer of the Test form, when it was sent.
	Test *testResult
}

// testResult is what the subscription would send for one event.
type testResult struct {
	Event, Envelope string
	Preview         subscriptions.Preview
	Err             string
}

// attemptStatuses are the choices of the attempts filter.
var attemptStatuses = []string{"delivered", "failed", "retrying", "dead_lettered"}

func (u *Console) subscription(r *Request) error {
	return u.renderSubscription(r, http.StatusOK, r.Param("id"), "", nil)
}

// renderSubscription renders subscription id's page, with newSecret when
// one was just generated, and the result of a test when one was asked.
func (u *Console) renderSubscription(r *Request, status int, id, newSecret string, test *testResult) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	s, err := u.cfg.Registry.Get(ctx, id)
	if err != nil {
		return subscriptionError(err)
	}
	if err := u.cfg.Attempts.CatchUp(ctx, u.cfg.Kafka); err != nil {
		return err
	}
	out := subscriptionData{Sub: s.Redacted(), Totals: u.cfg.Attempts.Totals(id), Statuses: attemptStatuses, NewSecret: newSecret, Test: test}
	var open []string
	open, out.CircuitsKnown = u.openCircuits(ctx)
	out.Health = health(s, open)
	out.Status = r.QueryParam("status")
	if !slices.Contains(attemptStatuses, out.Status) {
		out.Status = ""
	}
	lag, err := groups.Lag(ctx, u.cfg.Kafka, u.cfg.Names, "sub:"+id)
	if err != nil {
		out.LagErr = err.Error()
	}
	for _, g := range lag {
		out.Lag += g.Total
	}
	out.NoAttempts = "No delivery attempts yet: events matching this subscription are delivered as they arrive."
	if out.Status != "" {
		out.NoAttempts = "No attempts with status " + out.Status + " among the newest. Choose all to see every attempt."
	}
	out.Attempts, err = attempts.List(ctx, u.cfg.Kafka, u.cfg.Opts, u.cfg.Names,
		attempts.Query{Subscription: id, Status: out.Status, Limit: maxAttemptsShown})
	if err != nil {
		return err
	}
	return r.Render(status, "subscription.html", s.ID, "subscriptions", out)
}

// subscriptionForm is the form of a new subscription, as typed.
type subscriptionForm struct {
	ID, URL, Description, Sources, EventTypes, Filter, Transform, From string
	Ordered                                                            bool
	// Errors are the registry's refusals, one line each.
	Errors []string
}

func (u *Console) newSubscription(r *Request) error {
	return r.Render(http.StatusOK, "subscription_new.html", "New subscription", "subscriptions", subscriptionForm{From: "latest"})
}

// splitList reads a list typed with commas or one item a line.
func splitList(s string) *[]string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return &out
}

func (u *Console) createSubscription(r *Request) error {
	f := subscriptionForm{
		ID: strings.TrimSpace(r.FormValue("id")), URL: strings.TrimSpace(r.FormValue("url")),
		Description: r.FormValue("description"), Sources: r.FormValue("sources"), EventTypes: r.FormValue("event_types"),
		Filter: r.FormValue("filter"), Transform: r.FormValue("transform"), From: r.FormValue("from"),
		Ordered: r.FormValue("ordered") == "on",
	}
	p := subscriptions.Patch{URL: &f.URL, Description: &f.Description, Sources: splitList(f.Sources),
		EventTypes: splitList(f.EventTypes), Ordered: &f.Ordered, Filter: &f.Filter, Transform: &f.Transform}
	from := f.From
	if from == "latest" {
		from = ""
	}
	s := subscriptions.Subscription{ID: f.ID}
	err := p.Validate()
	if err == nil {
		p.Apply(&s)
		ctx, cancel := admin.Timeout(r.Context)
		defer cancel()
		err = u.cfg.Registry.Create(ctx, &s, from)
	}
	if err != nil {
		status, lines := formError(err)
		if lines == nil {
			return subscriptionError(err)
		}
		f.Errors = lines
		return r.Render(status, "subscription_new.html", "New subscription", "subscriptions", f)
	}
	return u.renderSubscription(r, http.StatusCreated, s.ID, s.Secret, nil)
}

// formError splits a refusal the form can show into its lines, with its
// status; lines nil for any other error.
func formError(err error) (int, []string) {
	status := http.StatusBadRequest
	switch {
	case errors.Is(err, subscriptions.ErrInvalid):
	case errors.Is(err, subscriptions.ErrExists), errors.Is(err, subscriptions.ErrLimit), errors.Is(err, subscriptions.ErrConflict):
		status = http.StatusConflict
	default:
		return 0, nil
	}
	msg := strings.TrimPrefix(err.Error(), subscriptions.ErrInvalid.Error()+": ")
	return status, strings.Split(msg, "\n")
}

// subscriptionError maps registry errors to statuses, as the API does.
func subscriptionError(err error) error {
	switch {
	case errors.Is(err, subscriptions.ErrNotFound):
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	case errors.Is(err, subscriptions.ErrExists), errors.Is(err, subscriptions.ErrConflict), errors.Is(err, subscriptions.ErrLimit):
		return echo.NewHTTPError(http.StatusConflict, err.Error())
	case errors.Is(err, subscriptions.ErrInvalid):
		return echo.NewHTTPError(http.StatusBadRequest, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return err
}

// subscriptionPath is the page of subscription id.
func subscriptionPath(id string) string {
	return admin.UIPrefix + "/subscriptions/" + url.PathEscape(id)
}

// update edits subscription id in the registry's read-modify-write.
func (u *Console) update(r *Request, edit func(*subscriptions.Subscription)) (subscriptions.Subscription, error) {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	s, err := u.cfg.Registry.Update(ctx, r.Param("id"), func(s *subscriptions.Subscription) error {
		edit(s)
		return nil
	})
	return s, subscriptionError(err)
}

func (u *Console) setEnabled(on bool) func(*Request) error {
	return func(r *Request) error {
		s, err := u.update(r, func(s *subscriptions.Subscription) { subscriptions.Patch{Enabled: &on}.Apply(s) })
		if err != nil {
			return err
		}
		msg := "Subscription " + s.ID + " enabled."
		if !on {
			msg = "Subscription " + s.ID + " disabled: no deliveries until it is enabled."
		}
		return r.Redirect(subscriptionPath(s.ID), msg)
	}
}

// rotateSecret sets a new secret and shows it, once; the previous one
// keeps signing for subscriptions.RotationOverlap.
func (u *Console) rotateSecret(r *Request) error {
	s, err := u.update(r, func(s *subscriptions.Subscription) { s.Rotate("", time.Now().UTC()) })
	if err != nil {
		return err
	}
	return u.renderSubscription(r, http.StatusOK, s.ID, s.Secret, nil)
}

// deleteSubscription deletes a subscription once its id is typed.
func (u *Console) deleteSubscription(r *Request) error {
	id := r.Param("id")
	if strings.TrimSpace(r.FormValue("confirm")) != id {
		return r.Redirect(subscriptionPath(id), "Not deleted: type the subscription's id to confirm.")
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	if err := u.cfg.Registry.Delete(ctx, id); err != nil {
		return subscriptionError(err)
	}
	return r.Redirect(admin.UIPrefix+"/subscriptions", "Subscription "+id+" deleted.")
}

// testSubscription shows what the subscription would send for an event
// named by its key or given as an envelope, as POST
// /api/subscriptions/{id}/test answers: nothing is delivered, and the
// subscription's own header values are hidden.
func (u *Console) testSubscription(r *Request) error {
	id := r.Param("id")
	t := &testResult{Event: strings.TrimSpace(r.FormValue("event")), Envelope: strings.TrimSpace(r.FormValue("envelope"))}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	s, err := u.cfg.Registry.Get(ctx, id)
	if err != nil {
		return subscriptionError(err)
	}
	e, err := subscriptions.TestEvent(ctx, u.cfg.Kafka, u.cfg.Opts, u.cfg.Names, t.Event, []byte(t.Envelope))
	status := http.StatusOK
	switch {
	case errors.Is(err, subscriptions.ErrEventNotFound):
		status, t.Err = http.StatusNotFound, err.Error()
	case errors.Is(err, subscriptions.ErrInvalid):
		status, t.Err = http.StatusBadRequest, strings.TrimPrefix(err.Error(), subscriptions.ErrInvalid.Error()+": ")
	case err != nil:
		return err
	default:
		c := subscriptions.Compile(s)
		t.Preview = c.Redact(c.Preview(e, time.Now(), u.cfg.UserAgent))
	}
	return u.renderSubscription(r, status, id, "", t)
}
