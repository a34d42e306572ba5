package tracing

import (
	"errors"
	"net/url"
	"strings"
)

// TraceIDPlaceholder is what a trace link template (HOOKSTREAM_TRACE_URL)
// names the trace id with.
const TraceIDPlaceholder = "{trace_id}"

// CheckTraceURL reports what is wrong with a trace link template, if
// anything: it must be an http or https URL with a host, containing
// {trace_id}, such as http://localhost:16686/trace/{trace_id}. The empty
// template, no link, is fine.
func CheckTraceURL(template string) error {
	if template == "" {
		return nil
	}
	if !strings.Contains(template, TraceIDPlaceholder) {
		return errors.New("want a URL containing " + TraceIDPlaceholder + ", e.g. http://localhost:16686/trace/" + TraceIDPlaceholder)
	}
	u, err := url.Parse(Link(template, strings.Repeat("0", 32)))
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return errors.New("want an http or https URL with a host, e.g. http://localhost:16686/trace/" + TraceIDPlaceholder)
	}
	return nil
}

// Link is the link to trace traceID (32 hex digits) that template
// (HOOKSTREAM_TRACE_URL, checked by CheckTraceURL) makes: every
// {trace_id} replaced by the id. Empty when either is.
func Link(template, traceID string) string {
	if template == "" || traceID == "" {
		return ""
	}
	return strings.ReplaceAll(template, TraceIDPlaceholder, traceID)
}
