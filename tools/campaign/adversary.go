package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// The adversary's fault kinds: parties of DESIGN's trust table doing what
// they can.
const (
	faultStorm = "storm"    // one event tried by many failing subscriptions
	faultDeep  = "deepjson" // a flood of JSON nested past the depth limit at every receiver
	faultRogue = "rogue"    // a rogue member joins the processor group, advertising an address the campaign listens on
)

const (
	// stormSubscriptions is how many subscriptions' attempts one event
	// gets: past the ~370 that outgrew the smallest record limit and the
	// ~720 that wedged a processor at a 64 KiB body limit.
	stormSubscriptions = 800
	// storyMaxDeliveries is DESIGN's bound on an event's story.
	storyMaxDeliveries = 64
	deepFloodFor       = 5 * time.Second
	deepFloodClients   = 32 // per receiver
	rogueHolds         = 10 * time.Second
	rogueMarker        = "rogue-forged-story"
)

// storm writes stormSubscriptions failed attempts of one accepted event to
// the attempts topic, as that many failing subscriptions would (creating
// that many real subscriptions costs a consumer group each in every
// dispatcher, far past this machine). The processor folds them into the
// event's story, which must stay bounded, and its partition must go on.
// As real attempts can only follow the event's processing (a dispatcher
// reads it from the events topic), the storm takes an event whose story
// exists: attempts of an event the processor has not claimed are skipped.
func (c *campaign) storm(ctx context.Context) error {
	key, err := c.processedSince(ctx, time.Now().Add(-10*time.Second), time.Minute)
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	c.mu.Lock()
	c.stormN++
	n := c.stormN
	c.stormKeys = append(c.stormKeys, key)
	c.mu.Unlock()
	errText := strings.Repeat("subscriber answered 500 Internal Server Error; ", 10)
	recs := make([]*kgo.Record, 0, stormSubscriptions)
	for i := range stormSubscriptions {
		a := topics.Attempt{Subscription: fmt.Sprintf("storm%d-%04d", n, i), EventID: key, N: 1,
			Outcome: topics.OutcomeFailed, Status: 500, Latency: time.Millisecond, Error: errText, At: time.Now()}
		recs = append(recs, a.Record(c.names.DeliveryAttempts))
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.producer.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("storm attempts: %w", err)
	}
	return nil
}

// processedSince waits at most timeout for one of the events accepted
// since t to have a story (processed), and returns its key.
func (c *campaign) processedSince(ctx context.Context, t time.Time, timeout time.Duration) (string, error) {
	keys := c.load.acceptedSince(t, 20)
	if len(keys) == 0 {
		return "", fmt.Errorf("no event accepted since %s", t.Format(time.TimeOnly))
	}
	deadline := time.Now().Add(timeout)
	for {
		var last error
		for _, key := range keys {
			_, err := c.story(ctx, key)
			if err == nil {
				return key, nil
			}
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("none of %d events accepted since %s processed within %s: %v", len(keys), t.Format(time.TimeOnly), timeout, last)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// storyShown is what the campaign reads of an event's story.
type storyShown struct {
	Deliveries []json.RawMessage `json:"deliveries"`
	Omitted    int               `json:"omitted"`
}

// story asks the first processor's admin API for key's story: an error
// unless it answers 200 with one.
func (c *campaign) story(ctx context.Context, key string) (storyShown, error) {
	var s storyShown
	var p *proc
	for _, q := range c.procs {
		if q.roles == "processor" {
			p = q
			break
		}
	}
	status, body, err := c.askStory(ctx, p, key)
	if err != nil {
		return s, err
	}
	err = json.Unmarshal(body, &s)
	if status != http.StatusOK || err != nil {
		return s, fmt.Errorf("story answered %d (%v)", status, err)
	}
	return s, nil
}

// askStory asks processor p's admin API, with the admin token, for key's
// story: the answer's status and at most 4 MiB of its body.
func (c *campaign) askStory(ctx context.Context, p *proc, key string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.adminAddr+"/api/events/"+url.PathEscape(key), nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := storyClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, body, err
}

var storyClient = &http.Client{Timeout: 10 * time.Second}

// deepFlood posts JSON nested as deep as the body limit allows to every
// receiver from deepFloodClients clients each for deepFloodFor. Every
// answer must be 400; memory is bounded by invariant 5.
func (c *campaign) deepFlood(ctx context.Context) error {
	body := bytes.Repeat([]byte("["), int(c.maxBody)-16)
	client := &http.Client{Timeout: 15 * time.Second}
	var sent, wrong atomic.Int64
	var lastWrong atomic.Value
	fctx, cancel := context.WithTimeout(ctx, deepFloodFor)
	defer cancel()
	var wg sync.WaitGroup
	for _, ing := range c.ingests {
		for range deepFloodClients {
			wg.Go(func() {
				for fctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ing.httpAddr+"/webhooks/poison", bytes.NewReader(body))
					if err != nil {
						return
					}
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						wrong.Add(1)
						lastWrong.Store(err.Error())
						continue
					}
					msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
					resp.Body.Close()
					sent.Add(1)
					if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(msg, []byte("nested deeper than")) {
						wrong.Add(1)
						lastWrong.Store(fmt.Sprintf("%d %s", resp.StatusCode, msg))
					}
				}
			})
		}
	}
	wg.Wait()
	c.log.Info("deep JSON flood", "requests", sent.Load(), "answered otherwise than 400", wrong.Load())
	if wrong.Load() > 0 {
		c.finding("deep JSON flood: %d of %d requests not answered 400 nested deeper than: e.g. %v", wrong.Load(), sent.Load(), lastWrong.Load())
	}
	return nil
}

// rogue joins the processor group as a member whose client id advertises
// an admin listener the campaign runs. While it holds partitions, the
// stories of recent events on every partition are asked of a processor
// with the admin token: the rogue must receive no credential, and no
// story it forges may be shown. The rogue commits nothing, so the
// partitions it held are processed once it leaves.
func (c *campaign) rogue(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var asked atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		var dump bytes.Buffer
		_ = r.Header.Write(&dump)
		if r.Header.Get("Authorization") != "" || bytes.Contains(dump.Bytes(), []byte(c.token)) {
			c.addViolation("rogue processor-group member received the admin credential: %s %s", r.Method, r.URL.Path)
		}
		key, _ := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/api/events/"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"status":"done","partition":0,"offset":0,"processed_at":"2020-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z","duplicates":{"count":0},"replays":{"count":0},"deliveries":[{"subscription":%q,"state":"delivered","attempts":1,"last_status":200,"recent_attempts":[]}]}`, key, rogueMarker)
	})}
	go func() { _ = srv.Serve(ln) }() // ends with Close below
	defer srv.Close()

	var assigned atomic.Int64
	member, err := kgo.NewClient(
		kgo.SeedBrokers(c.broker.seeds...),
		kgo.ClientID("hookstream-processor@"+ln.Addr().String()),
		kgo.ConsumerGroup(string(c.names.ProcessorGroup())),
		kgo.ConsumeTopics(string(c.names.Ingest)),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			assigned.Add(int64(len(m[string(c.names.Ingest)])))
		}),
	)
	if err != nil {
		return err
	}
	mctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for mctx.Err() == nil {
			member.PollFetches(mctx) // read and never commit
		}
	})
	defer func() {
		stop()
		wg.Wait()
		member.Close()
	}()

	deadline := time.Now().Add(60 * time.Second)
	for assigned.Load() == 0 && time.Now().Before(deadline) {
		sleepCtx(ctx, 200*time.Millisecond)
	}
	if assigned.Load() == 0 {
		return fmt.Errorf("rogue member was assigned no partition within 60s")
	}
	// Ask for the stories of recent events, wherever they live, from each
	// processor in turn while the rogue holds its partitions.
	var processors []*proc
	for _, p := range c.procs {
		if p.roles == "processor" {
			processors = append(processors, p)
		}
	}
	end := time.Now().Add(rogueHolds)
	var answers, refused int
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		for _, key := range c.load.acceptedSince(time.Now().Add(-time.Minute), 20) {
			p := processors[i%len(processors)]
			status, body, err := c.askStory(ctx, p, key)
			if err != nil {
				continue
			}
			answers++
			if status != http.StatusOK {
				refused++
			}
			if bytes.Contains(body, []byte(rogueMarker)) {
				c.addViolation("%s showed the rogue member's forged story of %s", p.name, key)
			}
		}
		sleepCtx(ctx, time.Second)
	}
	c.log.Info("rogue member", "partitions", assigned.Load(), "asked of the rogue", asked.Load(), "stories asked", answers, "not 200", refused)
	return nil
}

// addViolation records a broken trust boundary: an invariant failure.
func (c *campaign) addViolation(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) < 20 {
		c.violations = append(c.violations, fmt.Sprintf(format, args...))
	}
}

// stormStories checks the story of every stormed event: at most
// storyMaxDeliveries delivery entries, the rest counted as omitted.
func (c *campaign) stormStories(ctx context.Context) []string {
	c.mu.Lock()
	keys := append([]string(nil), c.stormKeys...)
	c.mu.Unlock()
	var bad []string
	for _, key := range keys {
		s, err := c.story(ctx, key)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", key, err))
		case len(s.Deliveries) > storyMaxDeliveries || s.Omitted < stormSubscriptions-storyMaxDeliveries:
			bad = append(bad, fmt.Sprintf("%s: story has %d deliveries and %d omitted, want at most %d and at least %d omitted",
				key, len(s.Deliveries), s.Omitted, storyMaxDeliveries, stormSubscriptions-storyMaxDeliveries))
		}
	}
	return bad
}
