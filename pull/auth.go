package pull

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// authorized reports whether the request carries a pull token of sub in
// force at now (the token, or the previous one during its overlap),
// compared in constant time.
func authorized(r *http.Request, sub subscriptions.Subscription, now time.Time) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return false
	}
	good := 0
	good |= subtle.ConstantTimeCompare([]byte(token), []byte(sub.Secret))
	if sub.PreviousSecret != "" && now.Before(sub.PreviousSecretUntil) {
		good |= subtle.ConstantTimeCompare([]byte(token), []byte(sub.PreviousSecret))
	}
	return good == 1 && sub.Secret != ""
}

// cursorKeys are the keys of sub's cursors in force at now: the current
// token's first, which signs new cursors.
func cursorKeys(sub subscriptions.Subscription, now time.Time) [][]byte {
	var keys [][]byte
	for _, k := range sub.Keys(now) {
		keys = append(keys, cursorKey(k))
	}
	return keys
}
