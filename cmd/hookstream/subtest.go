package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/subscriptions"
)

func newSubscriptionsTestCommand(output *string) *cobra.Command {
	var event, file string
	cmd := &cobra.Command{
		Use:   "test ID (--event SOURCE:ID | --file ENVELOPE.json)",
		Short: "Show whether a subscription receives an event, and the exact request it would send, sending nothing",
		Long: `Test tries a subscription on one event as the dispatcher would: its sources and
event_types globs, then its filter, say whether it receives the event and why;
when it does, test prints the request its first attempt would send: the body
(the envelope, or the transform's JSON; for a subscription that batches, a batch
holding this event alone) and every header: Content-Type, User-Agent,
webhook-id, webhook-timestamp and webhook-signature signed with the
subscription's secret now, the subscription's own headers, and the event's
traceparent (an attempt sends the same trace, with its own span id when spans
are exported). A transform that fails prints its error: the dispatcher
dead-letters such an event at stage transform. Nothing is delivered.

For a pull subscription it prints what a pull answer carries for the event:
its item in events (the envelope as written, or the transform's JSON) and its
item in trace_contexts; with --output json, body and trace_context. A
transform that fails prints its error: the answer lists the event in its
errors instead.

--event finds the event's latest record on the events topic, from the end of
its partition back (at most 100,000 records); --file takes an envelope as
'events tail' and 'events search --output json' print it ('-' reads stdin).
The API does the same: POST /api/subscriptions/{id}/test.`,
		Example: `  hookstream subscriptions test sub_abc --event github:72d3162e
  hookstream subscriptions test sub_abc --file envelope.json --output json
  hookstream events search --since 1h --type push --limit 1 --output json | hookstream subscriptions test sub_abc --file -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSubscriptionsTest(cmd, *output, args[0], event, file)
		},
	}
	cmd.Flags().StringVar(&event, "event", "", "the event SOURCE:ID, read from the events topic")
	cmd.Flags().StringVar(&file, "file", "", "a file holding the event's envelope JSON ('-': stdin)")
	return cmd
}

// runSubscriptionsTest prints what subscription id would send for the
// event named (key) or held in file.
func runSubscriptionsTest(cmd *cobra.Command, output, id, key, file string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	if (key == "") == (file == "") {
		return errors.New("name the event with --event SOURCE:ID or give its envelope with --file, one of the two")
	}
	var envelope []byte
	if file != "" {
		var err error
		if envelope, err = readEnvelope(cmd.InOrStdin(), file); err != nil {
			return err
		}
	}
	return withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		t, err := subscriptions.New(r, nil, deliveryClientConfig(c.cfg).UserAgent).Test(ctx, id, key, envelope)
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(cmd.OutOrStdout(), t.Preview)
		}
		return printPreview(cmd.OutOrStdout(), t.Subscription, t.Preview)
	})
}

// readEnvelope reads the envelope in file ('-': in), at most
// subscriptions.MaxTestEnvelope bytes.
func readEnvelope(in io.Reader, file string) ([]byte, error) {
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, subscriptions.MaxTestEnvelope+1))
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	if len(b) > subscriptions.MaxTestEnvelope {
		return nil, fmt.Errorf("--file: larger than %d bytes: not an envelope hookstream writes", subscriptions.MaxTestEnvelope)
	}
	return bytes.TrimSpace(b), nil
}

// traceContextJSON is tc as a pull answer writes it.
func traceContextJSON(tc map[string]string) []byte {
	if tc == nil {
		tc = map[string]string{}
	}
	b, _ := json.Marshal(tc) // a map of strings, its keys sorted
	return b
}

// printPreview prints p as the request it is (for a pull subscription,
// the answer's item): the verdict, then the
// request line, its headers in order and its body.
func printPreview(w io.Writer, s subscriptions.Subscription, p subscriptions.Preview) error {
	verdict := "no"
	if p.Match {
		verdict = "yes"
	}
	fmt.Fprintf(w, "match:   %s\nreason:  %s\n", verdict, p.Reason)
	if p.Error != "" {
		fmt.Fprintf(w, "error:   %s\n", p.Error)
	}
	if p.Body == nil {
		return nil
	}
	if s.Kind() == subscriptions.KindPull {
		_, err := fmt.Fprintf(w, "\na pull answer (GET /subscriptions/%s/events) carries it as\n  events[i]:          %s\n  trace_contexts[i]:  %s\n",
			s.ID, p.Body, traceContextJSON(p.TraceContext))
		return err
	}
	fmt.Fprintf(w, "\nPOST %s\n", s.URL)
	h := make(http.Header, len(p.Headers))
	for name, v := range p.Headers {
		h.Set(name, v)
	}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(w, "%s: %s\n", name, h.Get(name))
	}
	_, err := fmt.Fprintf(w, "\n%s\n", p.Body) // as sent, byte for byte: what the signature signs
	return err
}
