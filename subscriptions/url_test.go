package subscriptions

import (
	"net/url"
	"strings"
	"testing"
)

func TestValidateURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // the error, "" for none
	}{
		{"https://example.com/hook", ""},
		{"http://example.com", ""},
		{"HTTPS://Example.COM/hook?x=1", ""},
		{"https://example.com:8443/hook", ""},
		{"https://203.0.113.7/hook", ""},
		{"https://[2001:db8::1]:443/hook", ""},
		{"http://127.0.0.1:8080/hook", ""}, // refused when delivering unless AllowPrivate
		{"", "url: empty"},
		{"ftp://example.com/hook", "url: must be http or https"},
		{"javascript:alert(1)", "url: must be http or https"},
		{"example.com/hook", "url: no scheme: start it with https:// (or http://), as in https://example.com/hook"},
		{"example.com:8080/hook", "url: no scheme: start it with https:// (or http://), as in https://example.com/hook"},
		{"//example.com/hook", "url: no scheme: start it with https:// (or http://), as in https://example.com/hook"},
		{"/hook", "url: no scheme: start it with https:// (or http://), as in https://example.com/hook"},
		{"http:example.com", "url: must have a host, as in https://example.com/hook"},
		{"http:///hook", "url: must have a host, as in https://example.com/hook"},
		{"https://:443/hook", "url: must have a host, as in https://example.com/hook"},
		{"https://user:pass@example.com/hook", "url: must not contain user:password"},
		{"https://user@example.com/hook", "url: must not contain user:password"},
		{"https://example.com/hook#frag", "url: must not have a fragment"},
		{"https://example.com/hook#", "url: must not have a fragment"},
		{"https://example.com:0/hook", "url: port must be 1 to 65535"},
		{"https://example.com:65536/hook", "url: port must be 1 to 65535"},
		{"https://example.com:/hook", "url: port must be 1 to 65535"},
		{"https://example.com:http/hook", `url: invalid port ":http" after host`},
		{"https://exa mple.com/", `url: invalid character " " in host name`},
		{"https://example.com/\nhook", "url: net/url: invalid control character in URL"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got := ""
			if err := ValidateURL(tc.raw); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("ValidateURL(%q): got %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

// FuzzValidateURL checks that ValidateURL never panics, that the URLs it
// accepts parse as absolute http(s) URLs with a host and no user
// information, and that its errors are one line starting with "url: ".
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/hook", "http://127.0.0.1:8080/x?y=z", "https://[::1]:443/",
		"https://user:pass@example.com/", "ftp://x", "http:x", "https://x/#f", "https://x:0/",
		"http://[fe80::1%25eth0]/", "https://%zz/", "", "#", "http://a:b@c:d@e/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := ValidateURL(raw)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "url: ") || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("ValidateURL(%q): error %q, want one line starting with url: ", raw, msg)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("ValidateURL(%q) accepted a URL url.Parse refuses: %v", raw, perr)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Fragment != "" {
			t.Errorf("ValidateURL(%q) accepted scheme %q host %q user %v fragment %q", raw, u.Scheme, u.Hostname(), u.User, u.Fragment)
		}
	})
}
