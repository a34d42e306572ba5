package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// addToken makes a token with `hookstream tokens add` and returns it.
func (n *consoleNode) addToken(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := n.cli(t, append([]string{"tokens", "add", "--output", "json"}, args...)...)
	var tok struct{ Token string }
	if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.Token == "" {
		t.Fatalf("tokens add %v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
	}
	return tok.Token
}

// TestConsoleByRole signs in with a token of each role and reads what
// the console shows it: the identity in the header, the sections in the
// navigation, the buttons of a subscription's page and of the dead
// letters, and a page the role may not see typed in directly, refused
// 403.
func TestConsoleByRole(t *testing.T) {
	browser := newBrowser(t)
	n := startConsoleNode(t)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hook.Close)
	out, errOut, code := n.cli(t, "subscriptions", "add", "--url", hook.URL, "--team", "blue", "--output", "json")
	var sub struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.ID == "" {
		t.Fatalf("subscriptions add: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	nav := []string{"Overview", "Events", "Subscriptions", "Dead letters", "Groups", "Audit"}
	for _, c := range []struct {
		role, team string
		header     string
		nav        []string
		buttons    []string // on the subscription's page
		dlq        bool     // the dead letters page is served
		forbidden  string   // a page typed in, refused 403
	}{
		{"admin", "", "ops-lead · admin", nav, []string{"Edit", "Disable", "Rotate secret", "Delete this subscription", "Test"}, true, ""},
		{"operator", "", "night-shift · operator", nav, []string{"Disable", "Test"}, true, "/ui/subscriptions/" + sub.ID + "/edit"},
		{"viewer", "", "dashboards · viewer", []string{"Overview", "Events", "Subscriptions", "Groups"}, nil, false, "/ui/dlq"},
		{"team", "blue", "blue-bot · team · team blue", []string{"Subscriptions"}, []string{"Edit", "Disable", "Rotate secret", "Delete this subscription", "Test"}, false, "/ui/groups"},
	} {
		t.Run(c.role, func(t *testing.T) {
			name := strings.Fields(c.header)[0]
			args := []string{"--name", name, "--role", c.role}
			if c.team != "" {
				args = append(args, "--team", c.team)
			}
			secret := n.addToken(t, args...)
			b := newTab(t, browser)
			b.signInWith(n, secret)
			b.waitText(c.header)
			for _, section := range nav {
				want := strings.Contains(" "+strings.Join(c.nav, " | ")+" ", " "+section+" ")
				if got := b.has("link", section); got != want {
					t.Errorf("navigation link %q: shown %v, want %v", section, got, want)
				}
			}
			b.open(n.base + "/ui/subscriptions/" + sub.ID)
			b.waitText("Subscription " + sub.ID)
			for _, button := range []string{"Edit", "Disable", "Rotate secret", "Delete this subscription", "Test"} {
				role := "button"
				switch button {
				case "Edit":
					role = "link"
				case "Delete this subscription": // its form opens from a disclosure
					role = "DisclosureTriangle"
				}
				want := strings.Contains(" "+strings.Join(c.buttons, " | ")+" ", " "+button+" ")
				if got := b.has(role, button); got != want {
					t.Errorf("subscription page %s %q: shown %v, want %v", role, button, got, want)
				}
			}
			b.open(n.base + "/ui/dlq")
			if c.dlq {
				b.waitText("Dead letters")
				if strings.Contains(b.text(), "needs role") {
					t.Errorf("/ui/dlq as %s: refused, want it served", c.role)
				}
			} else {
				b.waitText("needs role admin or operator")
			}
			if c.forbidden != "" {
				b.open(n.base + c.forbidden)
				b.waitText("Forbidden", "needs role")
			}
		})
	}
}
