package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// faultHeavyExpr: a subscription whose filter walks every item of the
// payload is added under load, a provider sends payloads built to make
// it costly (lists of small objects, heavyExprBytes each: every
// subscriber receives them too, so not the body limit, which the
// dispatch tests cover), and the subscription is deleted again. The other subscribers'
// pace must hold meanwhile (invariant 8).
const faultHeavyExpr = "heavyexpr"

const (
	heavyExprFor   = 20 * time.Second
	heavyExprBytes = 64 << 10
	// heavyExprRate is the heavy payloads posted a second: each costs the
	// filter up to its runtime cost limit.
	heavyExprRate = 5
	// heavyExprFilter never matches: every heavy payload is walked whole
	// (twice), the load's events are refused by has() at once.
	heavyExprFilter = `has(data.items) && data.items.all(i, i.n >= 0) && data.items.exists(i, i.n == -1)`
	// paceBound is invariant 8's bound: the p99 of accepted-to-delivered
	// of the healthy subscribers' events accepted while a heavyexpr fault
	// runs.
	paceBound = 10 * time.Second
)

// heavyBody is a JSON object of {"n":i} items of about size bytes.
func heavyBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d}`, i)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// heavyExpr runs one faultHeavyExpr and notes its window.
func (c *campaign) heavyExpr(ctx context.Context) error {
	start := time.Now()
	id, _, err := c.addSubscription(ctx, "subscriptions", "add", "--url", "http://"+c.subAddr+"/sub/"+faultHeavyExpr,
		"--filter", heavyExprFilter, "--description", "campaign heavy filter")
	if err != nil {
		return err
	}
	body := heavyBody(min(heavyExprBytes, int(c.maxBody)))
	client := &http.Client{Timeout: 15 * time.Second}
	tick := time.NewTicker(time.Second / heavyExprRate)
	defer tick.Stop()
	var sent, refused int
	var lastRefusal string
	for end := time.Now().Add(heavyExprFor); time.Now().Before(end) && ctx.Err() == nil; {
		<-tick.C
		c.mu.Lock()
		c.heavyN++
		n := c.heavyN
		c.mu.Unlock()
		ing := c.ingests[n%len(c.ingests)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ing.httpAddr+"/webhooks/"+faultHeavyExpr, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-ID", "heavy-"+strconv.Itoa(n))
		resp, err := client.Do(req)
		sent++
		if err != nil {
			refused++
			lastRefusal = err.Error()
			continue // a process the fault before left down: counted, not a finding
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			refused++
			lastRefusal = fmt.Sprintf("%d %s", resp.StatusCode, msg)
		}
	}
	c.log.Info("heavy filter", "subscription", id, "payloads", sent, "payload_bytes", len(body), "not_accepted", refused, "last", lastRefusal)
	if _, err := cli(ctx, c.bin, c.cliEnv, "subscriptions", "rm", id); err != nil {
		return err
	}
	c.mu.Lock()
	c.heavyWindows = append(c.heavyWindows, [2]time.Time{start, time.Now()})
	c.mu.Unlock()
	return nil
}

// pace is invariant 8: how long the healthy subscribers took to receive
// the events accepted while a heavy filter ran beside them, against the
// same of the rest of the run.
type pace struct {
	Windows int           `json:"heavyexpr_windows"`
	Events  int           `json:"events"`
	P99     time.Duration `json:"p99"`
	Bound   time.Duration `json:"bound"`
	// Others is the p99 of the events accepted outside those windows.
	Others time.Duration `json:"p99_outside"`
}

// pace measures invariant 8 over the healthy subscribers' deliveries.
func (c *campaign) pace() pace {
	c.mu.Lock()
	windows := slices.Clone(c.heavyWindows)
	c.mu.Unlock()
	in := func(t time.Time) bool {
		return slices.ContainsFunc(windows, func(w [2]time.Time) bool { return !t.Before(w[0]) && !t.After(w[1]) })
	}
	var during, outside []time.Duration
	accepted := c.load.acceptedAt()
	for _, s := range c.subs.ofKind(subHealthy) {
		for key, got := range s.firstReceived() {
			at, ok := accepted[key]
			if !ok {
				continue
			}
			if in(at) {
				during = append(during, got.Sub(at))
			} else {
				outside = append(outside, got.Sub(at))
			}
		}
	}
	return pace{Windows: len(windows), Events: len(during), P99: p99(during), Bound: paceBound, Others: p99(outside)}
}

// p99 is the 99th percentile of ds, 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)*99)/100]
}

// firstReceived is when the subscriber first answered 2xx for each key
// (healthy subscribers only: the others do not keep it).
func (s *subscriber) firstReceived() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.first)
}
