package console

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// maxAttemptsShown bounds the attempts a subscription's page lists.
const maxAttemptsShown = 100

// mountSubscriptions serves the subscription pages: the list, a
// subscription, the forms of a new one and of an edit, and the buttons
// Enable, Disable, Rotate secret and Delete, each through subscriptions.Registry as
// /api/subscriptions does.
func (u *Console) mountSubscriptions(g *echo.Group) {
	u.get(g, "/subscriptions", u.subscriptionList, admin.ReadersAndTeams...)
	u.get(g, "/subscriptions/new", u.newSubscription, admin.AdminsAndTeams...)
	u.post(g, "/subscriptions/new", u.createSubscription, admin.AdminsAndTeams...).Changes("subscription.create")
	u.get(g, "/subscriptions/:id", u.subscription, admin.ReadersAndTeams...)
	u.get(g, "/subscriptions/:id/edit", u.editSubscription, admin.AdminsAndTeams...)
	u.post(g, "/subscriptions/:id/edit", u.saveSubscription, admin.AdminsAndTeams...).Changes("subscription.update")
	// Operators may enable and disable, as PATCH /api/subscriptions/{id}
	// of enabled alone.
	u.post(g, "/subscriptions/:id/enable", u.setEnabled(true), admin.OperatorsAndTeams...).Changes("subscription.enable")
	u.post(g, "/subscriptions/:id/disable", u.setEnabled(false), admin.OperatorsAndTeams...).Changes("subscription.disable")
	u.post(g, "/subscriptions/:id/rotate-secret", u.rotateSecret, admin.AdminsAndTeams...).Changes("subscription.rotate")
	u.post(g, "/subscriptions/:id/delete", u.deleteSubscription, admin.AdminsAndTeams...).Changes("subscription.delete")
	u.post(g, "/subscriptions/:id/test", u.testSubscription, admin.OperatorsAndTeams...)
}

// subscriptionRow is a subscription in the list.
type subscriptionRow struct {
	subscriptions.Subscription
	attempts.Totals
	Kind   string
	Health subscriptions.Health
	// Lag is the subscription's lag as groups.Amount writes it, empty
	// when unknown.
	Lag string
}

type subscriptionListData struct {
	Rows          []subscriptionRow
	LagErr        string
	CircuitsKnown bool
	// Counting, when the attempts tally had not caught up in the time a
	// page waits for it, says how much of the attempts the totals cover.
	Counting string
}

// mine reports whether the caller of r may see and manage s, as
// /api/subscriptions decides: any caller but a team token, and a team
// token its team's.
func mine(r *Request, s subscriptions.Subscription) bool {
	return r.Who.Role != admin.Team || s.Team == r.Who.Team
}

// getMine is Subscriptions.Get, a subscription not mine not found, as an
// unknown one.
func (u *Console) getMine(ctx context.Context, r *Request, id string) (subscriptions.Subscription, error) {
	s, err := u.cfg.Subscriptions.Get(ctx, id)
	if err == nil && !mine(r, s) {
		return subscriptions.Subscription{}, fmt.Errorf("%w: %s", subscriptions.ErrNotFound, id)
	}
	return s, err
}

// errOtherTeam refuses a team token a change that moves a subscription
// out of its team.
var errOtherTeam = echo.NewHTTPError(http.StatusForbidden, "a team token manages its own team's subscriptions only: team must be its team")

// dispatcherState is what this instance's dispatcher says of the
// subscriptions (open circuits, throttled expressions, failing ones);
// known false when it runs none.
func (u *Console) dispatcherState(ctx context.Context) (d subscriptions.Delivery, known bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return subscriptions.DeliveryOf(u.srv.Readiness(ctx))
}

func (u *Console) subscriptionList(r *Request) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	subs, err := u.cfg.Subscriptions.List(ctx)
	if err != nil {
		return err
	}
	var out subscriptionListData
	if out.Counting, err = u.catchUp(ctx, u.cfg.Attempts); err != nil {
		return err
	}
	state, known := u.dispatcherState(ctx)
	out.CircuitsKnown = known
	lags := make(map[string]string)
	if len(subs) > 0 {
		all, err := u.cfg.Groups.Lags(ctx, "")
		if err != nil {
			out.LagErr = err.Error()
		}
		for _, g := range all {
			if id, ok := groups.SubscriptionID(u.cfg.Cluster.Names, topics.Group(g.Group)); ok {
				lags[id] = g.TotalText()
			}
		}
	}
	for _, id := range sortedIDs(subs) {
		s := subs[id]
		if !mine(r, s) {
			continue
		}
		out.Rows = append(out.Rows, subscriptionRow{Subscription: s.Redacted(), Totals: u.cfg.Attempts.Totals(id),
			Kind: s.Kind(), Health: state.Health(s, known), Lag: lags[id]})
	}
	return r.Render(http.StatusOK, "subscriptions.html", "Subscriptions", "subscriptions", out)
}

// subscriptionData is one subscription's page.
type subscriptionData struct {
	Sub      subscriptions.Subscription
	Kind     string
	Totals   attempts.Totals
	Health   subscriptions.Health
	Lag      groups.GroupLag
	LagErr   string
	Attempts []attemptRow
	Status   string
	Statuses []string
	// NoAttempts is what the page says when no attempt is listed.
	NoAttempts string
	// NewSecret is shown once, right after it was generated.
	NewSecret string
	// Test is the answer of the Test form, when it was sent.
	Test *testResult
	// Counting, when the attempts tally had not caught up in the time a
	// page waits for it, says how much of the attempts Totals cover.
	Counting string
	// Answers: the caller may read what subscribers answered (attempts
	// and the error of the last failure quote it): not a viewer, as
	// GET /api/subscriptions/{id}/attempts.
	Answers bool
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
	s, err := u.getMine(ctx, r, id)
	if err != nil {
		return err
	}
	counting, err := u.catchUp(ctx, u.cfg.Attempts)
	if err != nil {
		return err
	}
	out := subscriptionData{Sub: s.Redacted(), Kind: s.Kind(), Totals: u.cfg.Attempts.Totals(id), Statuses: attemptStatuses, NewSecret: newSecret, Test: test,
		Counting: counting, Answers: r.Who.In(admin.OperatorsAndTeams)}
	if f := out.Totals.LastFailure; f != nil && !out.Answers {
		quiet := *f
		quiet.Error = ""
		out.Totals.LastFailure = &quiet
	}
	state, known := u.dispatcherState(ctx)
	out.Health = state.Health(s, known)
	out.Status = r.QueryParam("status")
	if !slices.Contains(attemptStatuses, out.Status) {
		out.Status = ""
	}
	switch lag, err := u.cfg.Groups.Lags(ctx, "sub:"+id); {
	case err != nil:
		out.LagErr = err.Error()
	case len(lag) == 1:
		out.Lag = lag[0]
	default:
		out.LagErr = fmt.Sprintf("%d groups answered for the subscription", len(lag))
	}
	out.NoAttempts = "No delivery attempts yet: events matching this subscription are delivered as they arrive."
	if s.Kind() == subscriptions.KindPull {
		out.NoAttempts = "No acknowledgments yet: an event is recorded here once its consumer presents a cursor past it."
	}
	if out.Status != "" {
		out.NoAttempts = "No attempts with status " + out.Status + " among the newest. Choose all to see every attempt."
	}
	if !out.Answers {
		return r.Render(status, "subscription.html", s.ID, "subscriptions", out)
	}
	listed, err := u.cfg.Subscriptions.Attempts(ctx,
		attempts.Query{Subscription: id, Status: out.Status, Limit: maxAttemptsShown})
	if err != nil {
		return err
	}
	out.Attempts = attemptRows(listed, s.Ordered)
	return r.Render(status, "subscription.html", s.ID, "subscriptions", out)
}

// attemptRow is an attempt as a subscription's page lists it: a real
// attempt (delivered or failed) with its next step, the dispatcher's
// decision after it (a retrying or dead_lettered record) folded in; or a
// decision listed without its attempt.
type attemptRow struct {
	attempts.Attempt
	// Result is what came of it: "delivered", "failed", "failed ·
	// dead-lettered", "failed · retry in place", "failed · retry at"
	// (RetryAt), or "dead-lettered" for an event dead-lettered with no
	// attempt (its transform failed).
	Result  string
	RetryAt time.Time
	// Measured: the row holds the real attempt, and its latency.
	Measured bool
}

// RetryClock is the time of day of the retry, as the page shows it.
func (a attemptRow) RetryClock() string { return a.RetryAt.UTC().Format("15:04:05") }

// decision reports whether a is the dispatcher's decision after a failed
// attempt rather than an attempt.
func decision(a attempts.Attempt) bool {
	return a.Outcome == topics.OutcomeRetrying || a.Outcome == topics.OutcomeDeadLettered
}

// decide folds decision d into the row of the failed attempt it follows.
func (a *attemptRow) decide(d attempts.Attempt) {
	switch {
	case d.Outcome == topics.OutcomeRetrying && d.DueAt != nil:
		a.Result, a.RetryAt = "failed · retry at", *d.DueAt
	case d.Outcome == topics.OutcomeRetrying:
		a.Result = "failed · retrying"
	case d.Attempt == 0:
		a.Result = "dead-lettered"
	default:
		a.Result = "failed · dead-lettered"
	}
}

// attemptRows lists attempts (newest first, as attempts.List answers)
// one row each: the decision after a failed attempt, the same event's of
// the same number, folds into the attempt's row; one whose attempt is
// not listed is a row of its own. A failed attempt of an ordered
// subscription with no decision was retried in place.
func attemptRows(list []attempts.Attempt, ordered bool) []attemptRow {
	type key struct {
		event  string
		n      int
		resend bool
	}
	rows := make([]attemptRow, 0, len(list))
	pending := make(map[key]int) // the row waiting for its other half
	for _, a := range list {
		k := key{a.EventID, a.Attempt, a.Resend}
		if i, ok := pending[k]; ok && rows[i].Measured == decision(a) {
			delete(pending, k)
			if decision(a) {
				rows[i].decide(a)
			} else {
				rows[i].Attempt, rows[i].Measured = a, true
			}
			continue
		}
		row := attemptRow{Attempt: a, Result: a.Outcome, Measured: !decision(a)}
		switch {
		case decision(a):
			row.decide(a)
		case a.Outcome == topics.OutcomeFailed && ordered:
			row.Result = "failed · retry in place"
		}
		if a.Outcome != topics.OutcomeDelivered {
			pending[k] = len(rows)
		}
		rows = append(rows, row)
	}
	return rows
}

// subscriptionForm is the form of a subscription, new or edited, as
// typed. Header values are write-only: the form names the headers and
// never holds their values, not even those just typed.
type subscriptionForm struct {
	ID, URL, Description, Sources, EventTypes, Filter, Transform, From string
	MaxInFlight, RateLimit, BatchMax, BatchWait, Schedule, Timeout     string
	Ordered                                                            bool
	// Pull: a pull subscription, whose form has none of a webhook's
	// fields (URL, ordering, concurrency, batching, retries, headers).
	Pull bool
	// Team owns the subscription; TeamFixed: the caller is a team token,
	// whose subscriptions are its team's, not a field it sets.
	Team      string
	TeamFixed bool
	// Headers are the subscription's headers (edit), by name.
	Headers []headerRow
	// NewHeaders are the names typed in the rows for new headers, one
	// empty row at least.
	NewHeaders []string
	// Version is the UpdatedAt of the version the edit form shows: saving
	// is refused once the subscription changed since.
	Version string
	// Errors are the refusals, one line each.
	Errors []string
}

// headerRow is a header of the subscription as the edit form shows it.
type headerRow struct {
	Name   string
	Remove bool
}

// newHeaderRows is how many rows for new headers a form offers.
const newHeaderRows = 3

// Form fields of the headers: "header.<Name>" sets an existing header's
// value (empty: keep it), "remove_header" (repeated) removes one, and
// the rows "new_header_name"/"new_header_value" add headers.
const (
	headerValueField    = "header."
	removeHeaderField   = "remove_header"
	newHeaderNameField  = "new_header_name"
	newHeaderValueField = "new_header_value"
)

// formOf is the form showing s to who.
func formOf(s subscriptions.Subscription, who admin.Identity) subscriptionForm {
	f := subscriptionForm{
		Team: s.Team, TeamFixed: who.Role == admin.Team,
		ID: s.ID, URL: s.URL, Description: s.Description, Sources: strings.Join(s.Sources, ", "),
		EventTypes: strings.Join(s.EventTypes, ", "), Filter: s.Filter, Transform: s.Transform, Ordered: s.Ordered, Pull: s.Pull,
		MaxInFlight: strconv.Itoa(s.MaxInFlight), RateLimit: strconv.FormatFloat(s.RateLimit, 'g', -1, 64),
		BatchMax: strconv.Itoa(s.BatchMax), Version: s.UpdatedAt.Format(time.RFC3339Nano),
	}
	if s.BatchWait != 0 {
		f.BatchWait = s.BatchWait.String()
	}
	if s.Timeout != 0 {
		f.Timeout = s.Timeout.String()
	}
	ds := make([]string, len(s.Schedule))
	for i, d := range s.Schedule {
		ds[i] = d.String()
	}
	f.Schedule = strings.Join(ds, ", ")
	for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
		f.Headers = append(f.Headers, headerRow{Name: name})
	}
	f.NewHeaders = make([]string, newHeaderRows)
	return f
}

// readSubscriptionForm reads the form of a subscription: what was typed
// (f), the patch of its fields and the change of its headers, and the
// lines of what cannot be read (numbers, durations, header rows).
// headers are the subscription's header names (edit; nil: new); pull
// says it is a pull subscription, whose patch sets only what such a
// subscription has (description, sources, event types, filter,
// transform).
func readSubscriptionForm(r *Request, headers []string, pull bool) (f subscriptionForm, p subscriptions.Patch, hc subscriptions.HeaderChange, problems []string) {
	form := r.Request().PostForm
	text := func(name string) string { return strings.ReplaceAll(form.Get(name), "\r\n", "\n") }
	f = subscriptionForm{
		ID: strings.TrimSpace(text("id")), URL: strings.TrimSpace(text("url")), Description: text("description"),
		Sources: text("sources"), EventTypes: text("event_types"), Filter: text("filter"), Transform: text("transform"),
		From: text("from"), MaxInFlight: strings.TrimSpace(text("max_in_flight")), RateLimit: strings.TrimSpace(text("rate_limit")),
		BatchMax: strings.TrimSpace(text("batch_max")), BatchWait: strings.TrimSpace(text("batch_wait")),
		Schedule: text("schedule"), Timeout: strings.TrimSpace(text("timeout")), Version: text("version"),
		Ordered: form.Get("ordered") == "on", Pull: pull,
	}
	p = subscriptions.Patch{Description: &f.Description, Sources: splitList(f.Sources),
		EventTypes: splitList(f.EventTypes), Filter: &f.Filter, Transform: &f.Transform}
	if f.TeamFixed, f.Team = r.Who.Role == admin.Team, strings.TrimSpace(text("team")); f.TeamFixed {
		f.Team = r.Who.Team
	} else {
		p.Team = &f.Team
	}
	if pull {
		return f, p, hc, nil
	}
	p.URL, p.Ordered = &f.URL, &f.Ordered
	number := func(field, v string, def int) *int {
		n := def
		if v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not a whole number", field, v))
			}
		}
		return &n
	}
	duration := func(field, v string) *subscriptions.Duration {
		var d time.Duration
		if v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not a duration such as 500ms or 2s", field, v))
			}
		}
		return (*subscriptions.Duration)(&d)
	}
	p.MaxInFlight = number("max_in_flight", f.MaxInFlight, subscriptions.DefaultMaxInFlight)
	p.BatchMax = number("batch_max", f.BatchMax, 1)
	rate := 0.0
	if f.RateLimit != "" {
		var err error
		if rate, err = strconv.ParseFloat(f.RateLimit, 64); err != nil {
			problems = append(problems, fmt.Sprintf("rate_limit: %q is not a number", f.RateLimit))
		}
	}
	p.RateLimit = &rate
	p.BatchWait = duration("batch_wait", f.BatchWait)
	p.Timeout = duration("timeout", f.Timeout)
	ds, err := config.ParseSchedule(f.Schedule)
	if err != nil {
		problems = append(problems, "schedule: "+err.Error())
	}
	schedule := make([]subscriptions.Duration, len(ds))
	for i, d := range ds {
		schedule[i] = subscriptions.Duration(d)
	}
	if len(schedule) == 0 {
		schedule = nil
	}
	p.Schedule = &schedule

	hc.Set = make(map[string]string)
	removed := form[removeHeaderField]
	for _, name := range headers {
		row := headerRow{Name: name, Remove: slices.Contains(removed, name)}
		f.Headers = append(f.Headers, row)
		v := form.Get(headerValueField + name)
		switch {
		case row.Remove && v != "":
			problems = append(problems, fmt.Sprintf("headers: %s both given a value and removed", name))
		case row.Remove:
			hc.Unset = append(hc.Unset, name)
		case v != "":
			hc.Set[name] = v
		}
	}
	names, values := form[newHeaderNameField], form[newHeaderValueField]
	for i := range max(len(names), len(values)) {
		var name, value string
		if i < len(names) {
			name = http.CanonicalHeaderKey(strings.TrimSpace(names[i]))
		}
		if i < len(values) {
			value = values[i]
		}
		f.NewHeaders = append(f.NewHeaders, name)
		_, twice := hc.Set[name]
		switch {
		case name == "" && value == "":
		case name == "":
			problems = append(problems, "headers: a value without a name (new header row "+strconv.Itoa(i+1)+")")
		case twice || slices.Contains(hc.Unset, name):
			problems = append(problems, fmt.Sprintf("headers: %s given twice", name))
		default:
			hc.Set[name] = value
		}
	}
	for len(f.NewHeaders) < newHeaderRows {
		f.NewHeaders = append(f.NewHeaders, "")
	}
	return f, p, hc, problems
}

func (u *Console) newSubscription(r *Request) error {
	f := formOf(subscriptions.Subscription{MaxInFlight: subscriptions.DefaultMaxInFlight, BatchMax: 1, Team: r.Who.Team}, r.Who)
	f.From, f.Version = "latest", ""
	return r.Render(http.StatusOK, "subscription_new.html", "New subscription", "subscriptions", f)
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

// checkForm validates a form's patch and header change as PATCH
// /api/subscriptions/{id} validates its body: nothing is read before.
func checkForm(p subscriptions.Patch, hc subscriptions.HeaderChange, problems []string) error {
	check := p
	check.Headers = &hc.Set
	err := check.Validate()
	if len(problems) == 0 {
		return err
	}
	lines := problems
	if err != nil {
		lines = append(lines, strings.TrimPrefix(err.Error(), subscriptions.ErrInvalid.Error()+": "))
	}
	return fmt.Errorf("%w: %s", subscriptions.ErrInvalid, strings.Join(lines, "\n"))
}

func (u *Console) createSubscription(r *Request) error {
	f, p, hc, problems := readSubscriptionForm(r, nil, r.Request().PostForm.Get("pull") == "on")
	from := f.From
	if from == "latest" {
		from = ""
	}
	s := subscriptions.Subscription{ID: f.ID, Pull: f.Pull}
	if r.Who.Role == admin.Team {
		s.Team = r.Who.Team // a team's subscription is its own
	}
	err := checkForm(p, hc, problems)
	if err == nil {
		p.Apply(&s)
		hc.Apply(&s)
		ctx, cancel := admin.Timeout(r.Context)
		defer cancel()
		err = u.cfg.Subscriptions.Create(ctx, &s, from)
		r.SetTarget(s.ID)
	}
	if err != nil {
		status, lines := formError(err)
		if lines == nil {
			return err
		}
		f.Errors = lines
		return r.Render(status, "subscription_new.html", "New subscription", "subscriptions", f)
	}
	return u.renderSubscription(r, http.StatusCreated, s.ID, s.Secret, nil)
}

// errStale refuses an edit of a subscription that changed after its form
// was opened: saving the form would undo that change.
var errStale = errors.New("changed after this form was opened")

func (u *Console) editSubscription(r *Request) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	s, err := u.getMine(ctx, r, r.Param("id"))
	if err != nil {
		return err
	}
	return r.Render(http.StatusOK, "subscription_edit.html", "Edit "+s.ID, "subscriptions", formOf(s, r.Who))
}

// saveSubscription saves the edit form as PATCH /api/subscriptions/{id}
// does (subscriptions.Patch, then Registry.Update), every field replaced
// by the form's but the header values left blank, and refuses it when the
// subscription changed since the form was opened. The filter and
// transform are compiled only when they changed, as the API's PATCH
// compiles only those it is given.
func (u *Console) saveSubscription(r *Request) error {
	id := r.Param("id")
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	cur, err := u.getMine(ctx, r, id)
	if err != nil {
		return err
	}
	f, p, hc, problems := readSubscriptionForm(r, slices.Sorted(maps.Keys(cur.Headers)), cur.Kind() == subscriptions.KindPull)
	f.ID = id
	version, verr := time.Parse(time.RFC3339Nano, f.Version)
	if verr != nil {
		problems = append(problems, "version: missing: reload the page")
	}
	if *p.Filter == cur.Filter {
		p.Filter = nil
	}
	if *p.Transform == cur.Transform {
		p.Transform = nil
	}
	err = checkForm(p, hc, problems)
	if err == nil {
		_, err = u.cfg.Subscriptions.Update(ctx, id, func(s *subscriptions.Subscription) error {
			if !mine(r, *s) {
				return fmt.Errorf("%w: %s", subscriptions.ErrNotFound, id)
			}
			if !s.UpdatedAt.Equal(version) {
				return fmt.Errorf("%s %w (at %s): reload the page to edit it as it is now", id, errStale, when(s.UpdatedAt))
			}
			p.Apply(s)
			hc.Apply(s)
			return nil
		})
	}
	if err != nil {
		status, lines := formError(err)
		if errors.Is(err, errStale) {
			status, lines = http.StatusConflict, []string{err.Error()}
		}
		if lines == nil {
			return err
		}
		f.Errors = lines
		return r.Render(status, "subscription_edit.html", "Edit "+id, "subscriptions", f)
	}
	return r.Redirect(subscriptionPath(id), "Subscription "+id+" saved.")
}

// formError splits a refusal the form can show (an invalid subscription,
// or one refused as things stand) into its lines, with its status; lines
// nil for any other error.
func formError(err error) (int, []string) {
	status := admin.Status(err)
	if status != http.StatusBadRequest && status != http.StatusConflict {
		return 0, nil
	}
	msg := strings.TrimPrefix(err.Error(), subscriptions.ErrInvalid.Error()+": ")
	return status, strings.Split(msg, "\n")
}

// subscriptionPath is the page of subscription id.
func subscriptionPath(id string) string {
	return admin.UIPrefix + "/subscriptions/" + url.PathEscape(id)
}

// update edits subscription id in the registry's read-modify-write; a
// team token only its team's, and never out of it.
func (u *Console) update(r *Request, edit func(*subscriptions.Subscription)) (subscriptions.Subscription, error) {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	id := r.Param("id")
	s, err := u.cfg.Subscriptions.Update(ctx, id, func(s *subscriptions.Subscription) error {
		if !mine(r, *s) {
			return fmt.Errorf("%w: %s", subscriptions.ErrNotFound, id)
		}
		edit(s)
		if !mine(r, *s) {
			return errOtherTeam
		}
		return nil
	})
	return s, err
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
	if _, err := u.getMine(ctx, r, id); err != nil {
		return err
	}
	if err := u.cfg.Subscriptions.Delete(ctx, id); err != nil {
		return err
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
	if _, err := u.getMine(ctx, r, id); err != nil {
		return err
	}
	tested, err := u.cfg.Subscriptions.Test(ctx, id, t.Event, []byte(t.Envelope))
	status := http.StatusOK
	switch {
	case errors.Is(err, topics.ErrEventNotFound):
		status, t.Err = http.StatusNotFound, err.Error()
	case errors.Is(err, subscriptions.ErrInvalid):
		status, t.Err = http.StatusBadRequest, strings.TrimPrefix(err.Error(), subscriptions.ErrInvalid.Error()+": ")
	case err != nil:
		return err
	default:
		t.Preview = tested.Redacted
	}
	return u.renderSubscription(r, status, id, "", t)
}
