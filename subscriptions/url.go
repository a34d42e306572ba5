package subscriptions

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ValidateURL checks a subscription URL when it is written: absolute http or
// https, a host, a valid port if any, no user:password, no fragment. Errors
// are one line and start with "url: ". Whether the host is a public address
// is checked at each delivery, by the dialer.
func ValidateURL(raw string) error {
	if raw == "" {
		return errors.New("url: empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // do not repeat the URL, which may hold secrets
			err = ue.Err
		}
		return fmt.Errorf("url: %w", err)
	}
	if strings.Contains(raw, "#") {
		return errors.New("url: must not have a fragment")
	}
	if noScheme(u) {
		return errors.New("url: no scheme: start it with https:// (or http://), as in https://example.com/hook")
	}
	return checkDeliveryURL(u)
}

// noScheme reports whether u was written without a scheme: a path
// ("example.com/hook"), or a host and port that url.Parse takes for a
// scheme ("example.com:8080/hook", "localhost:8080").
func noScheme(u *url.URL) bool {
	port := u.Opaque != "" && u.Opaque[0] >= '0' && u.Opaque[0] <= '9'
	return u.Scheme == "" || strings.Contains(u.Scheme, ".") || port
}

var errHTTPSRequired = errors.New("url: must be https (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS)")

// requireHTTPS refuses a URL that is not https, loopback aside.
func requireHTTPS(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !secureTarget(u) {
		return errHTTPSRequired
	}
	return nil
}

// secureTarget reports whether u is https, or http to this host by a
// loopback address or the name localhost: TLS there protects nothing.
func secureTarget(u *url.URL) bool {
	if strings.EqualFold(u.Scheme, "https") {
		return true
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkDeliveryURL checks the parsed form of a subscription URL (see
// ValidateURL).
func checkDeliveryURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("url: must be http or https")
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return errors.New("url: must have a host, as in https://example.com/hook")
	}
	if u.User != nil {
		return errors.New("url: must not contain user:password")
	}
	if u.Fragment != "" {
		return errors.New("url: must not have a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return errors.New("url: port must be 1 to 65535")
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return errors.New("url: port must be 1 to 65535")
	}
	return nil
}

// CheckTarget checks a delivery's target just before a request: the
// parsed form of a subscription URL (see ValidateURL), then https when
// requireHTTPS (loopback aside, as for RequireHTTPS).
func CheckTarget(u *url.URL, requireHTTPS bool) error {
	if err := checkDeliveryURL(u); err != nil {
		return err
	}
	if requireHTTPS && !secureTarget(u) {
		return errHTTPSRequired
	}
	return nil
}
