package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hookstream/hookstream/config"
)

// adminError is the error of an answer of the admin API at addr that is
// not a 2xx, with its status and body: the API's own words
// ({"error": "..."}), and for a 401 which setting carries the token.
func adminError(addr string, status int, body []byte) error {
	if status == http.StatusUnauthorized {
		return fmt.Errorf("admin API at %s refused the token (missing, wrong, revoked or expired): pass the admin token `hookstream run` has, or an access token (hookstream tokens add), with --admin-token or HOOKSTREAM_ADMIN_TOKEN", addr)
	}
	var e struct{ Message, Error string }
	_ = json.Unmarshal(body, &e) // not JSON: the status says it
	return fmt.Errorf("admin API at %s: %s", addr, cmp.Or(e.Error, e.Message, fmt.Sprintf("%d %s", status, http.StatusText(status))))
}

// adminCall sends method path with body, JSON when not nil, to the admin
// API of a running hookstream and returns its answer, an error unless it
// is a 2xx.
func adminCall(ctx context.Context, cfg *config.Config, method, path string, body any) ([]byte, error) {
	addr := cfg.AdminAddr
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no admin API at %s: is `hookstream run` running? set --admin-addr (%v)", addr, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", addr, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, adminError(addr, resp.StatusCode, raw)
	}
	return raw, nil
}
