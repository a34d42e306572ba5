package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
)

// adminError is the error of an answer of the admin API at addr that is
// not a 2xx, with its status and body: the API's own words
// ({"error": "..."}), and for a 401 which setting carries the token.
func adminError(addr string, status int, body []byte) error {
	if status == http.StatusUnauthorized {
		return fmt.Errorf("admin API at %s refused the admin token (missing or wrong): pass the one `hookstream run` has with --admin-token or HOOKSTREAM_ADMIN_TOKEN", addr)
	}
	var e struct{ Message, Error string }
	_ = json.Unmarshal(body, &e) // not JSON: the status says it
	return fmt.Errorf("admin API at %s: %s", addr, cmp.Or(e.Error, e.Message, fmt.Sprintf("%d %s", status, http.StatusText(status))))
}
