// Package apitest sends requests to hookstream's admin API in tests as
// the CLI and curl do: a JSON body, a bearer token. It is a test aid.
package apitest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Bearer is the Authorization header that carries token; "" for none.
func Bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// Call sends method base+path with body, as JSON when not empty, and the
// Authorization header authorization (none when empty), and returns the
// status and the answer. A request that cannot be sent fails the test.
func Call(t testing.TB, base, authorization, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}
