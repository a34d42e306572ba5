package admin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestRouteWithoutRolesIsNotMounted: a route mounted without naming the
// roles that may call it answers no one, and is not listed among the
// routes (which the route table test of cmd/hookstream compares with its
// table).
func TestRouteWithoutRolesIsNotMounted(t *testing.T) {
	s := admin.New(admin.Config{Token: "tok"}, prometheus.NewRegistry(), kafkatest.Logger(t))
	answer := func(c *echo.Context) error { return c.String(http.StatusOK, "served") }
	s.API().GET("/forgotten", answer)
	s.API().GET("/declared", answer, admin.Readers...)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	auth := http.Header{"Authorization": {"Bearer tok"}}
	if status, msg := send(t, srv, http.MethodGet, "/api/forgotten", auth, ""); status != http.StatusNotFound {
		t.Errorf("a route without roles: got %d %q, want 404", status, msg)
	}
	if status, msg := send(t, srv, http.MethodGet, "/api/declared", auth, ""); status != http.StatusOK {
		t.Errorf("a route with roles, as the bootstrap admin: got %d %q, want 200", status, msg)
	}
	var listed []string
	for _, r := range s.Routes() {
		listed = append(listed, r.Method+" "+r.Path)
	}
	for _, r := range listed {
		if r == "GET /api/forgotten" {
			t.Errorf("routes list the route without roles: %v", listed)
		}
	}
}
