package console_test

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestOverview: the overview shows each source's last minutes, the DLQ
// sizes, the subscriptions by health, and this instance's checks.
func TestOverview(t *testing.T) {
	h := serve(t, options{token: token})
	h.admin.AddCheck("processor", func(context.Context) (bool, any) {
		return false, map[string]any{"assigned": true, "partitions": []int32{0}, "restoring": []int32{1}}
	})
	b := h.browser(t)
	b.signIn()
	if a := b.get("/ui/"); !strings.Contains(a.body, "No events in the last 15 minutes.") || !strings.Contains(a.body, "No subscriptions yet.") {
		t.Errorf("empty overview: want the empty states, got:\n%s", a.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"sub_on", "sub_off"} {
		s := subscriptions.Subscription{ID: id, URL: "https://example.com/" + id}
		if err := h.registry.Create(ctx, &s, ""); err != nil {
			t.Fatal(err)
		}
	}
	off := false
	if _, err := h.registry.Update(ctx, "sub_off", func(s *subscriptions.Subscription) error {
		subscriptions.Patch{Enabled: &off}.Apply(s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	src := func(topic topics.Topic, key string, more ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: string(topic), Key: []byte(key), Value: []byte("{}"),
			Headers: append([]kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte("shop")}}, more...)}
	}
	names := h.env.Names
	if err := h.cl.ProduceSync(ctx,
		src(names.Ingest, "shop:1"), src(names.Ingest, "shop:1"), src(names.Ingest, "shop:2"),
		src(names.Events, "shop:1"),
		src(names.DLQ, "shop:2", kgo.RecordHeader{Key: topics.HeaderErrorStage, Value: []byte(topics.StageProcess)}),
		(&topics.Attempt{Subscription: "sub_on", EventID: "shop:1", N: 3, Outcome: topics.OutcomeDeadLettered, At: time.Now()}).Record(names.DeliveryAttempts),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	a := b.get("/ui/")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`<th scope="row">shop</th>\s*<td class="num" data-label="Accepted">3 <svg`),
		regexp.MustCompile(`<td class="num" data-label="Duplicates">1 <svg`),
		// the last minute, or the one before when the page is read in the next
		regexp.MustCompile(`aria-label="shop accepted per minute, oldest first: (0, ){13}(0, 3|3, 0)"`),
		regexp.MustCompile(`>1</span> in the processor DLQ`),
		regexp.MustCompile(`>1</span> in the delivery DLQ`),
		regexp.MustCompile(`>1</span> health unknown <span class="muted">\(this instance runs no dispatcher\)`),
		regexp.MustCompile(`>1</span> disabled</p>\s*<a href="/ui/subscriptions/sub_off">sub_off</a>`),
		regexp.MustCompile(`Restoring partitions: 1`),
		regexp.MustCompile(`<span class="badge bad">not ready</span>`),
		regexp.MustCompile(`<span class="badge">this one</span>`), // the instances: this one at least
	} {
		if !want.MatchString(a.body) {
			t.Errorf("overview: missing %s", want)
		}
	}
	if a.status != http.StatusOK {
		t.Errorf("overview: got %d", a.status)
	}
}

// TestOverviewWhileCounting: when the tallies have not read what was
// written before a request in the time a page waits for them, the
// overview and the subscription pages show the counts read so far and say
// how much they cover; the tallies read on after the request, and once
// they are caught up the pages say nothing of it.
func TestOverviewWhileCounting(t *testing.T) {
	held := make(chan struct{})
	h := serve(t, options{token: token, tallyWait: time.Nanosecond, tallies: held})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := h.env.Names
	var records []*kgo.Record
	for i := range 10 {
		records = append(records, &kgo.Record{Topic: string(names.Ingest), Key: fmt.Appendf(nil, "shop:%d", i), Value: []byte("{}"),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte("shop")}}})
	}
	for _, id := range []string{"shop:1", "shop:2"} {
		records = append(records, (&topics.Attempt{Subscription: "sub_on", EventID: id, N: 1, Outcome: topics.OutcomeDelivered, At: time.Now()}).Record(names.DeliveryAttempts))
	}
	if err := h.cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := h.registry.Create(ctx, &subscriptions.Subscription{ID: "sub_on", URL: "https://example.com/on"}, ""); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	b.signIn()
	if a := b.get("/ui/"); a.status != http.StatusOK ||
		!strings.Contains(a.body, "Still counting: the figures cover 0 of the topics&#39; 12 records (0%); reload in a moment.") {
		t.Errorf("overview while counting: got %d:\n%s", a.status, a.body)
	}
	if a := b.get("/ui/subscriptions"); a.status != http.StatusOK ||
		!strings.Contains(a.body, "Still counting: the figures cover 0 of the topics&#39; 2 records (0%)") {
		t.Errorf("subscriptions while counting: got %d:\n%s", a.status, a.body)
	}
	if a := b.get("/ui/subscriptions/sub_on"); a.status != http.StatusOK || !strings.Contains(a.body, "Still counting") {
		t.Errorf("a subscription while counting: got %d:\n%s", a.status, a.body)
	}

	close(held) // the tallies read on, asked by the requests above, with no request waiting
	kafkatest.WaitFor(t, 20*time.Second, func() error {
		if n := h.stats.Sources()["shop"].Accepted; n != 10 {
			return fmt.Errorf("the tally counted %d accepted, want 10", n)
		}
		return nil
	})
	kafkatest.WaitFor(t, 20*time.Second, func() error {
		a := b.get("/ui/")
		if strings.Contains(a.body, "Still counting") || !regexp.MustCompile(`data-label="Accepted">10 <svg`).MatchString(a.body) {
			return fmt.Errorf("overview: want 10 accepted and no note, got:\n%s", a.body)
		}
		return nil
	})
	if a := b.get("/ui/subscriptions"); strings.Contains(a.body, "Still counting") {
		t.Errorf("subscriptions caught up: still counting:\n%s", a.body)
	}
	if a := b.get("/ui/subscriptions/sub_on"); strings.Contains(a.body, "Still counting") {
		t.Errorf("a subscription caught up: still counting:\n%s", a.body)
	}
}

// TestThrottledSubscriptionShown: a subscription the dispatcher throttled
// (its filter and transform spent their share of the CPU, as /readyz
// says) is "throttled" in the overview, the list and its own page, not
// delivering.
func TestThrottledSubscriptionShown(t *testing.T) {
	h := serve(t, options{token: token})
	h.admin.AddCheck("dispatcher", func(context.Context) (bool, any) {
		return true, map[string]any{"open_circuits": []string{}, "disabled": []string{}, "throttled": []string{"sub_heavy"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"sub_heavy", "sub_plain"} {
		if err := h.registry.Create(ctx, &subscriptions.Subscription{ID: id, URL: "https://example.com/" + id}, ""); err != nil {
			t.Fatal(err)
		}
	}
	b := h.browser(t)
	b.signIn()
	for _, c := range []struct {
		page string
		want *regexp.Regexp
	}{
		{"/ui/", regexp.MustCompile(`>1</span> delivering`)},
		{"/ui/", regexp.MustCompile(`>1</span> throttled</p>\s*<a href="/ui/subscriptions/sub_heavy">sub_heavy</a>`)},
		{"/ui/subscriptions", regexp.MustCompile(`sub_heavy</a>(.|\n)*?<span class="badge warn">throttled</span>(.|\n)*?sub_plain</a>(.|\n)*?<span class="badge ok">delivering</span>`)},
		{"/ui/subscriptions/sub_heavy", regexp.MustCompile(`<span class="badge warn">throttled</span> <span class="muted">its filter and transform spent their share`)},
	} {
		if a := b.get(c.page); a.status != http.StatusOK || !c.want.MatchString(a.body) {
			t.Errorf("%s: got %d, want %s in:\n%s", c.page, a.status, c.want, a.body)
		}
	}
}

// TestFailingSubscriptionShown: subscriptions the dispatcher says are
// failing (a subscriber answering 401, a host that does not resolve, a
// transform that fails) are "failing" with the reason in the overview,
// the list and their own pages, not delivering; once the dispatcher lists
// them no more (a success), they are delivering again.
func TestFailingSubscriptionShown(t *testing.T) {
	h := serve(t, options{token: token})
	reasons := map[string]string{
		"sub_401": "401 Unauthorized",
		"sub_dns": "host does not resolve: hooks.example.invalid",
		"sub_tx":  "transform error: no such key: sender",
	}
	since := time.Now().Add(-time.Minute)
	var recovered atomic.Bool
	h.admin.AddCheck("dispatcher", func(context.Context) (bool, any) {
		failing := make(map[string]subscriptions.Failing)
		if !recovered.Load() {
			for id, reason := range reasons {
				failing[id] = subscriptions.Failing{Reason: reason, Since: since, Failures: subscriptions.FailingAfter}
			}
		}
		return true, map[string]any{"open_circuits": []string{}, "disabled": []string{}, "throttled": []string{}, "failing": failing}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id := range reasons {
		if err := h.registry.Create(ctx, &subscriptions.Subscription{ID: id, URL: "https://example.com/" + id}, ""); err != nil {
			t.Fatal(err)
		}
	}
	b := h.browser(t)
	b.signIn()
	overview := b.get("/ui/")
	if want := regexp.MustCompile(`>3</span> failing</p>\s*<a href="/ui/subscriptions/sub_401">sub_401</a> <span class="muted">401 Unauthorized</span>`); !want.MatchString(overview.body) {
		t.Errorf("overview: want %s in:\n%s", want, overview.body)
	}
	if want := `>0</span> delivering`; !strings.Contains(overview.body, want) {
		t.Errorf("overview: want %s", want)
	}
	list := b.get("/ui/subscriptions")
	for id, reason := range reasons {
		want := `<span class="badge bad">failing</span> <span class="muted">` + template.HTMLEscapeString(reason) + `, since <time`
		if !strings.Contains(list.body, want) {
			t.Errorf("list: want %s in:\n%s", want, list.body)
		}
		if a := b.get("/ui/subscriptions/" + id); !strings.Contains(a.body, want) {
			t.Errorf("%s: want %s in:\n%s", id, want, a.body)
		}
	}

	recovered.Store(true)
	if a := b.get("/ui/"); !strings.Contains(a.body, `>3</span> delivering`) || !strings.Contains(a.body, `>0</span> failing`) {
		t.Errorf("overview after success: want 3 delivering, 0 failing, got:\n%s", a.body)
	}
	if a := b.get("/ui/subscriptions/sub_401"); !strings.Contains(a.body, `<span class="badge ok">delivering</span>`) {
		t.Errorf("sub_401 after success: want delivering, got:\n%s", a.body)
	}
}
