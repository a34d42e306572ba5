package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
)

// The events pages: a lookup box, the newest events newest first
// (events.Service.Newest) until a search by source, type and time range
// (events.Service.Search, as GET /api/events and hookstream events
// search) lists its events oldest first, an event's story and its
// resends (events_story.go), and the live tail (events_tail.go).
//
// Bound: the page reads at most events.MaxRead (10,000) offsets of the
// events topic and shows at most events.MaxLimit (100) events; a search's
// next page goes on from its cursor.

// mountEvents serves the events pages.
func (u *Console) mountEvents(g *echo.Group) {
	u.get(g, "/events", u.eventSearch, admin.Readers...)
	u.get(g, "/events/tail", u.eventTail, admin.Readers...)
	u.get(g, "/events/tail/stream", u.eventStream, admin.Readers...)
	// A story as its reader may read it (events.Service.Story): a
	// team's of its subscriptions, a viewer's without payloads.
	u.get(g, "/events/*", u.eventStory, admin.ReadersAndTeams...)
	u.post(g, "/events/*", u.eventResend, admin.OperatorsAndTeams...).Changes("event.resend")
}

// eventsForm is the search form, as the page's URL holds it.
type eventsForm struct {
	Source, Type, Since, Until, Cursor string
}

// eventsData is the events page.
type eventsData struct {
	Form eventsForm
	// Newest are the newest events, newest first, until a search runs.
	Newest []events.Result
	// Searched says a search ran; Page is what it found.
	Searched bool
	Page     events.Page
	// Next is the query of the next page, empty at the end.
	Next  string
	Error string
}

// newestEvents serves the page as it opens: the newest events, and the
// search form ready for the last hour.
func (u *Console) newestEvents(r *Request, data eventsData) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	newest, err := u.cfg.Events.Newest(ctx, events.MaxLimit)
	if err != nil {
		return err
	}
	data.Form.Since, data.Newest = "1h", newest
	return r.Render(http.StatusOK, "events.html", "Events", "events", data)
}

// eventSearch serves the lookup box (?id= opens the event's story) and
// the search.
func (u *Console) eventSearch(r *Request) error {
	if id := strings.TrimSpace(r.QueryParam("id")); id != "" {
		return r.Context.Redirect(http.StatusSeeOther, admin.UIPrefix+"/events/"+url.PathEscape(id))
	}
	f := eventsForm{
		Source: strings.TrimSpace(r.QueryParam("source")), Type: strings.TrimSpace(r.QueryParam("type")),
		Since: strings.TrimSpace(r.QueryParam("since")), Until: strings.TrimSpace(r.QueryParam("until")), Cursor: r.QueryParam("cursor"),
	}
	data := eventsData{Form: f}
	if r.QueryParam("search") == "" && f.Cursor == "" {
		return u.newestEvents(r, data)
	}
	q := events.Query{Source: f.Source, Type: f.Type, Cursor: f.Cursor, Limit: events.MaxLimit, MaxRead: events.MaxRead}
	now := time.Now()
	for _, t := range []struct {
		name, value string
		at          *time.Time
	}{{"since", f.Since, &q.Since}, {"until", f.Until, &q.Until}} {
		if t.value == "" || f.Cursor != "" {
			continue
		}
		at, err := events.ParseTime(t.value, now)
		if err != nil {
			data.Error = t.name + ": " + err.Error()
			return r.Render(http.StatusBadRequest, "events.html", "Events", "events", data)
		}
		*t.at = at
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	page, err := u.cfg.Events.Search(ctx, q)
	if err != nil {
		if status := admin.Status(err); status != 0 {
			data.Error = err.Error()
			return r.Render(status, "events.html", "Events", "events", data)
		}
		return err
	}
	data.Searched, data.Page = true, page
	if page.Cursor != "" {
		next := url.Values{"source": {f.Source}, "type": {f.Type}, "since": {f.Since}, "until": {f.Until}, "cursor": {page.Cursor}}
		data.Next = next.Encode()
	}
	return r.Render(http.StatusOK, "events.html", "Events", "events", data)
}
