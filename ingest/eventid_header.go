package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// parseHeaderPart compiles the NAME of header:NAME or {header:NAME}.
func parseHeaderPart(name string) (fieldPart, error) {
	if name == "" {
		return fieldPart{}, errors.New("header: empty name")
	}
	for i := 0; i < len(name); i++ {
		if !isHeaderNameChar(name[i]) {
			return fieldPart{}, fmt.Errorf("header %q: invalid header name", name)
		}
	}
	return fieldPart{kind: fieldPartHeader, text: textproto.CanonicalMIMEHeaderKey(name)}, nil
}

// fieldHeaderValue returns the first value of the header with canonical name
// canon, without canonicalizing again on the hot path.
func fieldHeaderValue(h http.Header, canon string) string {
	if v := h[canon]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// isHeaderNameChar reports whether c may appear in an HTTP header name (RFC 9110
// token).
func isHeaderNameChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
