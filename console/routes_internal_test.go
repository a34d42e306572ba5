package console

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestRouteWithoutRolesNotMounted: a console route that names no role is
// not mounted: it answers 404 to everyone, admins included, and is not
// among the routes.
func TestRouteWithoutRolesNotMounted(t *testing.T) {
	srv := admin.New(admin.Config{}, prometheus.NewRegistry(), kafkatest.Logger(t))
	u, err := New(Config{Log: kafkatest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	u.Mount(srv)
	served := false
	u.get(srv.UI(), "/forgotten", func(r *Request) error {
		served = true
		return r.String(http.StatusOK, "served")
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	resp, err := http.Get(hs.URL + "/ui/forgotten")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || served {
		t.Errorf("GET /ui/forgotten as the local admin: got %d (handler ran: %v), want 404", resp.StatusCode, served)
	}
	if slices.ContainsFunc(u.Routes(), func(r *Route) bool { return strings.HasSuffix(r.Path, "/forgotten") }) {
		t.Errorf("a route without roles is among the routes")
	}
}
