package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestAdminAnswerErrors: what the admin API of a hookstream run with a
// token answers a CLI command becomes an error that says what to do: no
// token or the wrong one names --admin-token and HOOKSTREAM_ADMIN_TOKEN;
// a refusal reads as the API wrote it.
func TestAdminAnswerErrors(t *testing.T) {
	srv := admin.New(admin.Config{Token: "s3cret"}, prometheus.NewRegistry(), kafkatest.Logger(t))
	srv.API().GET("/refused", func(*echo.Context) error {
		return admin.Error(admin.Of(admin.Invalid("invalid"), errors.New("invalid filter: mismatched input '<EOF>'")))
	}, admin.Readers...)
	api := httptest.NewServer(srv)
	t.Cleanup(api.Close)
	addr := strings.TrimPrefix(api.URL, "http://")
	for _, tc := range []struct {
		name, token, want string
	}{
		{"no token", "", "admin API at " + addr + " refused the token (missing, wrong, revoked or expired): pass the admin token `hookstream run` has, or an access token (hookstream tokens add), with --admin-token or HOOKSTREAM_ADMIN_TOKEN"},
		{"wrong token", "guess", "admin API at " + addr + " refused the token (missing, wrong, revoked or expired): pass the admin token `hookstream run` has, or an access token (hookstream tokens add), with --admin-token or HOOKSTREAM_ADMIN_TOKEN"},
		{"refused", "s3cret", "admin API at " + addr + ": invalid filter: mismatched input '<EOF>'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, api.URL+"/api/refused", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got := adminError(addr, resp.StatusCode, body); got == nil || got.Error() != tc.want {
				t.Errorf("got %v, want %q", got, tc.want)
			}
		})
	}
}
