package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// subPull names the pull subscription's client in the invariants and the
// report, subPullSlow its slow clients.
const (
	subPull     = "pull"
	subPullSlow = "pull-slow"
)

// Slow pullers: each consumes the pull subscription with its own cursor,
// reading its answers at slowPullRate, so that their answers stay being
// written and hold the ingest process's pull budget; each must still
// read every event. The rate reads a full answer (4 MiB: heavyexpr's
// 64 KiB events fill one) within the pull server's 30 s write deadline:
// a consumer slower than that is cut off and must ask for fewer events.
const (
	slowPullers  = 8
	slowPullRate = 256 << 10 // bytes a second
)

// puller consumes the campaign's pull subscription as a firewalled
// service would: it long-polls the ingest listeners in turn with its
// token and its cursor, and drops one answer in three unread, as if
// lost on the way: the next request presents the same cursor and must
// get the same events again. It counts the events of the answers it
// read, by envelope id.
type puller struct {
	id, token string
	rng       *rand.Rand // only run's goroutine draws from it
	// rate bounds how fast it reads an answer, in bytes a second; 0:
	// at once.
	rate int

	mu  sync.Mutex
	got map[string]int
	// since is when the request of its first answer read began: a
	// client without a cursor starts at the subscription's committed
	// position, which the other clients move, so only the events
	// accepted after it are surely after its start.
	since    time.Time
	answers  int64 // read
	dropped  int64 // ignored as lost
	failures int64 // requests that failed or were refused
	lastErr  string
}

func newPuller(id, token string, seed uint64, rate int) *puller {
	return &puller{id: id, token: token, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), got: make(map[string]int), rate: rate}
}

// pullAnswer is what GET /subscriptions/{id}/events answers.
type pullAnswer struct {
	Events []struct {
		ID string `json:"id"`
	} `json:"events"`
	Cursor string `json:"cursor"`
}

// run pulls until ctx ends, from the addresses addrs gives (the ingest
// listeners running now), in turn.
func (p *puller) run(ctx context.Context, addrs func() []string) {
	client := &http.Client{Timeout: 40 * time.Second}
	cursor := ""
	for turn := 0; ctx.Err() == nil; turn++ {
		all := addrs()
		if len(all) == 0 {
			sleepCtx(ctx, time.Second)
			continue
		}
		asked := time.Now()
		answer, err := p.pull(ctx, client, all[turn%len(all)], cursor)
		if err != nil {
			p.mu.Lock()
			p.failures++
			p.lastErr = err.Error()
			p.mu.Unlock()
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if p.rng.IntN(3) == 0 {
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
			continue // lost: the same cursor again
		}
		p.mu.Lock()
		if p.since.IsZero() {
			p.since = asked
		}
		p.answers++
		for _, e := range answer.Events {
			p.got[e.ID]++
		}
		p.mu.Unlock()
		cursor = answer.Cursor
	}
}

// pull makes one request.
func (p *puller) pull(ctx context.Context, client *http.Client, addr, cursor string) (pullAnswer, error) {
	q := url.Values{"limit": {"200"}, "wait": {"5s"}}
	if p.rate > 0 {
		q.Set("limit", "1000")
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/subscriptions/"+p.id+"/events?"+q.Encode(), nil)
	if err != nil {
		return pullAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := client.Do(req)
	if err != nil {
		return pullAnswer{}, err
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if p.rate > 0 {
		r = &slowReader{ctx: ctx, r: r, rate: p.rate}
	}
	body, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return pullAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return pullAnswer{}, fmt.Errorf("%s: %.200s", resp.Status, body)
	}
	var a pullAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return pullAnswer{}, fmt.Errorf("answer: %w", err)
	}
	return a, nil
}

// start is since: the zero time before a first answer.
func (p *puller) start() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.since
}

// received reports whether an answer read carried the event key.
func (p *puller) received(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[key] > 0
}

// stats are the puller's counts for the report.
func (p *puller) stats() (answers, dropped, failures int64, repeated int, lastErr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.got {
		if n > 1 {
			repeated++
		}
	}
	return p.answers, p.dropped, p.failures, repeated, p.lastErr
}

// slowReader reads at most rate bytes a second, in reads of a tenth of it.
type slowReader struct {
	ctx  context.Context
	r    io.Reader
	rate int
}

func (s *slowReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b[:min(len(b), max(1, s.rate/10))])
	sleepCtx(s.ctx, time.Duration(n)*time.Second/time.Duration(s.rate))
	return n, err
}
