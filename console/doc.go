// Package console is the operators' web console, served under /ui on the
// admin listener from templates and assets embedded in the binary (no
// CDN, no external request, no script on its pages but the files of
// static/). It owns the browser's side of access: sign-in with the admin
// token, the session cookie, CSRF tokens, the same-origin check and the
// security headers. It refuses to own any behaviour of its own: every
// page reads, and every button calls, the same services as the /api
// handlers (subscriptions, events, groups, deadletter, instances; the
// stats and attempts tallies), so a console action is also an API call
// and a CLI command, and their errors read the same (admin.Error).
//
// Access. With HOOKSTREAM_ADMIN_TOKEN, /ui/login takes the token and sets
// a session cookie (HttpOnly, SameSite=Strict, Secure over TLS, 12 h)
// whose value is MAC'd under a key derived from the token: no session
// table, and changing the token ends every session. With a token or
// without, before any handler runs or a session is looked at or issued, a
// request of any method that a page of another site or origin sent is
// refused 403 by the guard /api uses without a token
// (admin.Server.RefuseCrossSite): a cross-site or same-site
// Sec-Fetch-Site, top-level navigations included, or an Origin other than
// the console's own; without a token a Host that is not loopback too. So
// no page can read the console, hold a live tail or start a scan; a local
// client sending neither header (curl) is served. Every POST is also
// refused 403 unless it comes from the console's own origin (Origin, else
// Sec-Fetch-Site, else Referer) and carries the session's CSRF token (form
// field "csrf" or header X-CSRF-Token).
//
// Bound. A console request reads a bounded number of records, with one
// exception: the overview and the subscription pages read none
// themselves (they show the stats and attempts tallies, kept in memory,
// offsets, and the instances as GET /api/instances asks them, at most
// 64) and wait at most a second (Config.TallyWait) for the tallies to
// read what was written since they last read, which on the first request
// after start, or after a minute without one, is every record the
// ingest, events, DLQ and attempts topics received meanwhile (from their
// start at first: about three records per event, 19 s for 1,000,000
// events on two loaded cores). A page the tallies have not caught up
// with by then shows the counts read so far and says how much of the
// topics' records they cover, while the tallies read on (5.6 ms per
// overview once caught up; BENCHMARKS.md). A
// subscription's attempts read at most attempts.MaxScan (100,000) records
// per partition of the attempts topic (1,200,000 over the default 12),
// and show at most 100 of them; its
// Test reads at most 100,000 records of one events partition to find the
// event named. The groups and replay pages read offsets and count the
// unread records, at most 1 MiB a partition and 8 MiB a page, counting
// offsets past that (groups.Service.Lags, groups.PlanReplay); the dead-letter
// pages read each DLQ partition from 1,000 offsets before its end to the
// end, show at most 100 letters per DLQ and redrive at most 500 (read
// from where its preview's window began to the DLQ's end; when that end
// lies more than deadletter.MaxPastWithin (1,000) offsets past the
// window's, the redrive reads nothing and answers 409). An
// events search page reads at most events.MaxRead (10,000) offsets; a
// live tail streams at most 1,000 events for at most 10 minutes, 8 tails
// at once per instance. A form is at most 256 KiB.
//
// Adding a page. One file per page family (subscriptions.go with
// templates/subscriptions*.html): a mountX method called by Mount
// registers its routes on the /ui group, behind guard: GET routes through
// u.page, POST routes through u.action, which refuses any request without
// the session's CSRF token or from another origin before the handler
// runs.
// A handler takes a *Request and ends with r.Render(status, "page.html",
// title, nav, data) or, after an action, r.Redirect(path, message). Each
// file of templates/ not starting with "_" is a page: it defines
// "content" (the layout.html around it has the navigation, the flash
// message and the footer); files starting with "_" hold the shared
// partials ("time", "csrf", "empty"). Forms that POST include
// {{template "csrf" .}}; page data is under .Data. Errors returned by a
// handler render as the error page with their echo.HTTPError status.
package console
