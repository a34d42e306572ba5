package tracing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/subscriptions"
)

// headerSubscriber answers 200 and keeps the headers of every delivery.
type headerSubscriber struct {
	mu  sync.Mutex
	got []http.Header
}

func (s *headerSubscriber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.got = append(s.got, r.Header.Clone())
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *headerSubscriber) deliveries() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.got...)
}

// TestProviderTraceContext: a provider's traceparent sets the trace id
// and the parent of the receiver's span through the whole pipeline, never
// the sampling decision, which the configured sampler takes at the
// receiver and every later hop (processor, delivery attempt) follows; a
// provider's tracestate reaches neither the subscriber's request nor a
// pull answer. At 0% a provider's sampled=1 exports nothing of its
// trace, and the subscriber and the pull consumer are told it is not
// sampled; at 100% (the default sampler) a provider's sampled=0 does not
// keep its trace from being exported whole.
func TestProviderTraceContext(t *testing.T) {
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		provider = "00f067aa0ba902b7"
	)
	for _, tc := range []struct {
		name, sampler, arg, flags string
		exported                  bool
	}{
		{"0%, provider sampled", "parentbased_traceidratio", "0", "01", false},
		{"100%, provider not sampled", "", "", "00", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			recv := otlptest.New(t)
			tr := otlptest.Tracing(t, recv.URL)
			env := kafkatest.New(t, 1, pipelineMaxBody)
			log := kafkatest.Logger(t)
			ingestURL := receiver(t, env, tr, log)
			run(t, "processor", newProcessor(env, tr, log, t.TempDir()).Run)
			registry := dispatcher(t, env, tr, log)
			ps := pull.New(pull.Config{Names: env.Names, Tracing: tr}, env.Client(t), registry, log, prometheus.NewRegistry())
			run(t, "pull", ps.Run)
			e := echo.New()
			e.GET(pull.Path, ps.Events)
			pullSrv := httptest.NewServer(e)
			t.Cleanup(pullSrv.Close)

			sub := &headerSubscriber{}
			subSrv := httptest.NewServer(sub)
			t.Cleanup(subSrv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			webhook := subscriptions.Subscription{URL: subSrv.URL}
			pulled := subscriptions.Subscription{Pull: true}
			for _, s := range []*subscriptions.Subscription{&webhook, &pulled} {
				if err := registry.Create(ctx, s, "earliest"); err != nil {
					t.Fatalf("create subscription: %v", err)
				}
			}

			req, _ := http.NewRequest(http.MethodPost, ingestURL+"/webhooks/shop", strings.NewReader(`{"n":1}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Event-Id", "1")
			req.Header.Set("traceparent", "00-"+traceID+"-"+provider+"-"+tc.flags)
			req.Header.Set("tracestate", "vendor=1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST: got %d, want 202", resp.StatusCode)
			}

			wantFlags := map[bool]string{true: "01", false: "00"}[tc.exported]
			// checkContext checks a traceparent and tracestate passed on.
			checkContext := func(what, traceparent, tracestate string) {
				t.Helper()
				got := strings.Split(traceparent, "-")
				if len(got) != 4 || got[1] != traceID || got[2] == provider || got[3] != wantFlags {
					t.Errorf("%s: traceparent %q, want a span of hookstream's in trace %s, flags %s", what, traceparent, traceID, wantFlags)
				}
				if tracestate != "" {
					t.Errorf("%s: tracestate %q, want none: a provider's is not passed on", what, tracestate)
				}
			}
			var delivered http.Header
			kafkatest.WaitFor(t, 60*time.Second, func() error {
				got := sub.deliveries()
				if len(got) == 0 {
					return fmt.Errorf("no delivery yet")
				}
				delivered = got[0]
				return nil
			})
			checkContext("subscriber's request", delivered.Get("traceparent"), delivered.Get("tracestate"))

			var answer struct {
				Events        []json.RawMessage   `json:"events"`
				TraceContexts []map[string]string `json:"trace_contexts"`
			}
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				req, _ := http.NewRequest(http.MethodGet, pullSrv.URL+"/subscriptions/"+pulled.ID+"/events?wait=5s", nil)
				req.Header.Set("Authorization", "Bearer "+pulled.Secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("pull: got %d, want 200", resp.StatusCode)
				}
				if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
					return err
				}
				if len(answer.Events) != 1 || len(answer.TraceContexts) != 1 {
					return fmt.Errorf("pull: got %d events, %d trace contexts, want 1 and 1", len(answer.Events), len(answer.TraceContexts))
				}
				return nil
			})
			checkContext("pull answer", answer.TraceContexts[0]["traceparent"], answer.TraceContexts[0]["tracestate"])

			const ingestName, deliverName = "POST /webhooks/:source", "POST"
			processName := "process " + string(env.Names.Ingest)
			if !tc.exported {
				env.WaitCommitted(t, env.Names.SubscriptionGroup(webhook.ID), env.Names.Events)
				if err := tr.Provider.(interface{ ForceFlush(context.Context) error }).ForceFlush(ctx); err != nil {
					t.Fatal(err)
				}
				if got := recv.Trace(traceID); len(got) != 0 {
					t.Errorf("spans of the provider's trace: got\n%s\nwant none", otlptest.Tree(got))
				}
				return
			}
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				byName := map[string][]otlptest.Span{}
				for _, s := range recv.Trace(traceID) {
					byName[s.Name] = append(byName[s.Name], s)
				}
				if len(byName[ingestName]) != 1 || len(byName[processName]) != 1 || len(byName[deliverName]) != 1 {
					return fmt.Errorf("spans of the provider's trace: got\n%s\nwant the receiver's, the processor's and the attempt's", otlptest.Tree(recv.Trace(traceID)))
				}
				in, pr, de := byName[ingestName][0], byName[processName][0], byName[deliverName][0]
				if in.ParentID != provider || pr.ParentID != in.SpanID || de.ParentID != pr.SpanID {
					return fmt.Errorf("parents: receiver's %s, processor's %s, attempt's %s; want %s, %s, %s", in.ParentID, pr.ParentID, de.ParentID, provider, in.SpanID, pr.SpanID)
				}
				return nil
			})
		})
	}
}
