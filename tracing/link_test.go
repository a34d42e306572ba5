package tracing_test

import (
	"fmt"
	"testing"

	"github.com/hookstream/hookstream/tracing"
)

func TestCheckTraceURL(t *testing.T) {
	for _, tt := range []struct {
		template string
		ok       bool
	}{
		{"", true},
		{"http://localhost:16686/trace/{trace_id}", true},
		{"https://grafana.example.com/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D", true},
		{"http://localhost:16686/trace/", false},           // no placeholder
		{"localhost:16686/trace/{trace_id}", false},        // no scheme
		{"javascript:alert('{trace_id}')", false},          // not http(s)
		{"file:///tmp/{trace_id}", false},                  // not http(s)
		{"http:///trace/{trace_id}", false},                // no host
		{"http://local host/trace/{trace_id}", false},      // not a URL
		{"http://localhost:16686/trace/{trace_ID}", false}, // the placeholder is exact
	} {
		if err := tracing.CheckTraceURL(tt.template); (err == nil) != tt.ok {
			t.Errorf("CheckTraceURL(%q): got %v, want ok %v", tt.template, err, tt.ok)
		}
	}
}

func ExampleLink() {
	fmt.Println(tracing.Link("http://localhost:16686/trace/{trace_id}", "4bf92f3577b34da6a3ce929d0e0e4736"))
	fmt.Printf("%q\n", tracing.Link("", "4bf92f3577b34da6a3ce929d0e0e4736"))
	// Output:
	// http://localhost:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736
	// ""
}
