package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleLongURLsFit: at 1280×800 a subscription whose URL is 300
// characters long leaves the subscription pages no wider than the screen
// and their tables no wider than their place (no scrolling sideways); the
// list shows the URL cut, the whole of it on hover.
func TestConsoleLongURLsFit(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	n := startConsoleNode(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(sink.Close)
	long := sink.URL + "/hooks/"
	long += strings.Repeat("x", 300-len(long))
	id := n.subscribe(t, long)
	n.mustAccept(t, "wide-1", `{"type":"push"}`)

	b := newTab(t, browser)
	b.signIn(n)
	b.waitPage(n.base+"/ui/subscriptions/"+id, "delivered")
	for _, path := range []string{"/ui/subscriptions", "/ui/subscriptions/" + id} {
		b.open(n.base + path)
		width, err := within(b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if width[0] > width[1] {
			t.Errorf("%s at 1280×800: the page is %dpx wide, wider than the screen (%dpx)", path, width[0], width[1])
		}
		wide, err := within(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll(".table-wrap")].filter(w => w.scrollWidth > w.clientWidth).map(w => w.scrollWidth + "px in " + w.clientWidth + "px")`))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(wide) > 0 {
			t.Errorf("%s at 1280×800: tables scroll sideways: %s", path, strings.Join(wide, ", "))
		}
	}
	b.open(n.base + "/ui/subscriptions")
	hover, err := within(b, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('[title=%q]').length`, long)))
	if err != nil {
		t.Fatal(err)
	}
	if hover != 1 {
		t.Errorf("/ui/subscriptions: %d elements carry the whole URL as their title, want 1: its cut cell", hover)
	}
}
