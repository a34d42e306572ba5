package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/subscriptions"
)

// TestNoWebPageReachesTheConsole: as /api does without a token, the
// console refuses (403) what a page of another site or origin sends, with
// or without a token and whatever the method: a cross-site or same-site
// Sec-Fetch-Site (a top-level navigation included), or an Origin other
// than its own (another port of the same host, null). A refused request
// gets no session and runs nothing: eight refused live tails take no
// place, and the operator's own tail is served after them. What a local
// client (curl, the CLI) or the console's own pages send is served.
func TestNoWebPageReachesTheConsole(t *testing.T) {
	for _, tok := range []string{"", token} {
		name := "without a token"
		if tok != "" {
			name = "with a token"
		}
		t.Run(name, func(t *testing.T) {
			h := serve(t, options{token: tok})
			sub := createSub(t, h, subscriptions.Subscription{URL: "https://subscriber.example/hook"})
			b := h.browser(t)
			form := url.Values{}
			if tok != "" {
				// A page of the same site (another port, a sibling host
				// name) is sent the SameSite=Strict cookie: the refusals
				// must not rest on the cookie's absence, nor on the CSRF
				// token's.
				form.Set("csrf", b.signIn())
			} else {
				b.http.Jar = nil // each request a visitor without a session
			}
			u, _ := url.Parse(h.srv.URL)
			refused := []struct {
				name   string
				header http.Header
			}{
				{"top-level navigation from another site", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}},
				{"image of another site", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"image"}}},
				{"page of the same site", http.Header{"Sec-Fetch-Site": {"same-site"}, "Sec-Fetch-Mode": {"no-cors"}}},
				{"Origin of another host", http.Header{"Origin": {"https://evil.example"}}},
				{"Origin posing as loopback", http.Header{"Origin": {"http://127.0.0.1.evil.example"}}},
				{"Origin of another port", http.Header{"Origin": {"http://" + u.Hostname() + ":1"}}},
				{"Origin of another loopback name", http.Header{"Origin": {"http://localhost:" + u.Port()}}},
				{"Origin null", http.Header{"Origin": {"null"}}},
			}
			requests := []struct{ method, path string }{
				{http.MethodGet, "/ui/"},
				{http.MethodGet, "/ui/subscriptions/" + sub.ID}, // its attempts scan
				{http.MethodGet, "/ui/events/tail"},
				{http.MethodGet, "/ui/login"},
				{http.MethodGet, "/ui/static/console.css"},
				{http.MethodGet, "/ui/no-such-page"},
				{http.MethodPost, "/ui/login"},
				{http.MethodPost, "/ui/subscriptions/" + sub.ID + "/disable"},
			}
			for _, tc := range refused {
				b.header = tc.header
				for _, rq := range requests {
					var body url.Values
					if rq.method == http.MethodPost {
						body = form
					}
					a := b.do(rq.method, rq.path, body)
					if a.status != http.StatusForbidden || !strings.Contains(a.body, "cross-site request refused") || a.header.Get("Set-Cookie") != "" {
						t.Errorf("%s: %s %s: got %d, Set-Cookie %q; want 403 cross-site request refused, and no cookie",
							tc.name, rq.method, rq.path, a.status, a.header.Get("Set-Cookie"))
					}
				}
			}
			if !getSub(t, h, sub.ID).Enabled {
				t.Errorf("a refused request disabled subscription %s", sub.ID)
			}
			for i := range 8 {
				tc := refused[i%len(refused)]
				if _, status := b.openTail("/ui/events/tail/stream", tc.header); status != http.StatusForbidden {
					t.Errorf("%s: live tail %d: got %d, want 403", tc.name, i+1, status)
				}
			}
			if _, status := b.openTail("/ui/events/tail/stream", http.Header{"Sec-Fetch-Site": {"same-origin"}}); status != http.StatusOK {
				t.Errorf("the operator's own live tail after 8 refused: got %d, want 200", status)
			}

			served := []struct {
				name   string
				header http.Header
			}{
				{"curl", http.Header{}},
				{"a page of the console", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {"navigate"}}},
				{"typed in or a bookmark", http.Header{"Sec-Fetch-Site": {"none"}, "Sec-Fetch-Mode": {"navigate"}}},
				{"its own Origin", http.Header{"Origin": {h.srv.URL}}},
			}
			for _, tc := range served {
				b.header = tc.header
				for _, path := range []string{"/ui/", "/ui/subscriptions/" + sub.ID} {
					if a := b.get(path); a.status != http.StatusOK {
						t.Errorf("%s: GET %s: got %d, want 200", tc.name, path, a.status)
					}
				}
			}
		})
	}
}
