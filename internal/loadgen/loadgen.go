// Package loadgen is hookstream's load generator: webhooks POSTed at an
// open-loop rate (or as fast as a concurrency bound allows), signed as a
// provider would, with a share of duplicate ids, and latencies kept in HDR
// histograms measured from each request's intended start, so a stalled
// server cannot hide its stalls (no coordinated omission). Its Sink is a
// subscriber endpoint that measures end-to-end latency, POST to delivery,
// by event id, each event of a batched delivery counted.
package loadgen

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

// Config is one load run.
type Config struct {
	// URL receives the POSTs, e.g. http://127.0.0.1:8080/webhooks/bench.
	URL string
	// Source is the source name in URL; event ids are <Source>:<id>.
	Source string
	// Rate is requests per second, open loop; 0 sends as fast as
	// Concurrency allows.
	Rate float64
	// Concurrency bounds requests in flight.
	Concurrency int
	// Duration of the run.
	Duration time.Duration
	// BodySize is the JSON body size in bytes.
	BodySize int
	// MaxBodySize, when above BodySize, makes each body's size a draw
	// between BodySize and MaxBodySize, log-uniform: as many bodies
	// between 256 B and 512 B as between 32 KiB and 64 KiB.
	MaxBodySize int
	// Duplicates is the share (0 to 1) of requests that repeat an earlier id.
	Duplicates float64
	// Scheme signs requests: none, github or standard; Secret is its key.
	Scheme, Secret string
}

// Percentiles summarizes a latency histogram.
type Percentiles struct {
	Count int64         `json:"count"`
	P50   time.Duration `json:"p50"`
	P90   time.Duration `json:"p90"`
	P99   time.Duration `json:"p99"`
	P999  time.Duration `json:"p999"`
	Max   time.Duration `json:"max"`
}

// Report is the outcome of a run.
type Report struct {
	Sent      int64            `json:"sent"`
	Completed int64            `json:"completed"`
	Errors    int64            `json:"errors"`
	Status    map[string]int64 `json:"status"`
	Elapsed   time.Duration    `json:"elapsed"`
	PerSecond float64          `json:"requests_per_second"`
	Latency   Percentiles      `json:"latency"`
	// EndToEnd is POST sent to delivery received, when a Sink ran.
	EndToEnd *Percentiles `json:"end_to_end,omitempty"`
	// Undelivered counts distinct events sent that the Sink never got.
	Undelivered int `json:"undelivered,omitempty"`
}

// Progress is a running count, reported once a second.
type Progress struct {
	Elapsed   time.Duration
	Completed int64
	Errors    int64
	Delivered int64
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(5*time.Minute/time.Microsecond), 3) // µs
}

func summarize(h *hdrhistogram.Histogram) Percentiles {
	at := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Percentiles{Count: h.TotalCount(), P50: at(50), P90: at(90), P99: at(99), P999: at(99.9), Max: time.Duration(h.Max()) * time.Microsecond}
}

// Run sends load until cfg.Duration passes or ctx ends. sink, when not
// nil, is told each event's send time.
func Run(ctx context.Context, cfg Config, client *http.Client, sink *Sink, progress func(Progress)) (Report, error) {
	if cfg.Concurrency < 1 {
		return Report{}, fmt.Errorf("concurrency: %d must be at least 1", cfg.Concurrency)
	}
	if cfg.Duplicates < 0 || cfg.Duplicates > 1 {
		return Report{}, fmt.Errorf("duplicates: %v is not between 0 and 1", cfg.Duplicates)
	}
	if cfg.MaxBodySize > 0 && cfg.MaxBodySize < cfg.BodySize {
		return Report{}, fmt.Errorf("max body size: %d is below the body size %d", cfg.MaxBodySize, cfg.BodySize)
	}
	var key []byte
	switch cfg.Scheme {
	case "", ingest.SchemeNone:
	case ingest.SchemeGitHub:
		key = []byte(cfg.Secret)
	case ingest.SchemeStandard:
		k, err := signature.DecodeSecret(cfg.Secret)
		if err != nil {
			return Report{}, fmt.Errorf("secret: %w", err)
		}
		key = k
	default:
		return Report{}, fmt.Errorf("scheme: %q is not none, github or standard", cfg.Scheme)
	}
	pad := bytes.Repeat([]byte("x"), max(cfg.BodySize, cfg.MaxBodySize))
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)

	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		mu      sync.Mutex
		hist    = newHistogram()
		status  = make(map[string]int64)
		sent    atomic.Int64
		done    atomic.Int64
		errs    atomic.Int64
		wg      sync.WaitGroup
		slots   = make(chan struct{}, cfg.Concurrency)
		started = time.Now()
	)
	send := func(n int64, intended time.Time) {
		defer func() { <-slots }()
		id := run + "-" + strconv.FormatInt(n, 10)
		if n > 0 && rand.Float64() < cfg.Duplicates {
			id = run + "-" + strconv.FormatInt(rand.Int64N(n), 10)
		}
		body := fmt.Appendf(nil, `{"id":%q,"type":"bench","pad":""}`, id)
		body = slices.Insert(body, len(body)-2, pad[:max(0, bodySize(cfg)-len(body))]...)
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, cfg.URL, bytes.NewReader(body))
		if err != nil {
			errs.Add(1)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-ID", id)
		sign(req, cfg.Scheme, key, id, body)
		if sink != nil {
			sink.sent(cfg.Source+":"+id, intended)
		}
		resp, err := client.Do(req)
		elapsed := time.Since(intended)
		if err != nil {
			errs.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done.Add(1)
		mu.Lock()
		_ = hist.RecordValue(max(1, elapsed.Microseconds())) // values past the top are counted in Max only
		status[strconv.Itoa(resp.StatusCode)]++
		mu.Unlock()
	}

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	next := started
loop:
	for n := int64(0); ; n++ {
		if interval > 0 {
			next = started.Add(time.Duration(n) * interval)
			if wait := time.Until(next); wait > 0 {
				select {
				case <-ctx.Done():
					break loop
				case <-time.After(wait):
				}
			}
		} else {
			next = time.Now()
		}
		select {
		case <-ctx.Done():
			break loop
		case slots <- struct{}{}:
		}
		select {
		case <-ticker.C:
			if progress != nil {
				progress(Progress{Elapsed: time.Since(started), Completed: done.Load(), Errors: errs.Load(), Delivered: sink.delivered()})
			}
		default:
		}
		sent.Add(1)
		intended := next
		wg.Go(func() { send(n, intended) })
	}
	wg.Wait()
	elapsed := time.Since(started)
	r := Report{Sent: sent.Load(), Completed: done.Load(), Errors: errs.Load(), Status: status, Elapsed: elapsed,
		PerSecond: float64(done.Load()) / elapsed.Seconds(), Latency: summarize(hist)}
	return r, nil
}

// bodySize is the size of the next body.
func bodySize(cfg Config) int {
	if cfg.MaxBodySize <= cfg.BodySize {
		return cfg.BodySize
	}
	lo := math.Log(float64(max(cfg.BodySize, 1)))
	return int(math.Exp(lo + rand.Float64()*(math.Log(float64(cfg.MaxBodySize))-lo)))
}

// sign adds the scheme's signature headers.
func sign(req *http.Request, scheme string, key []byte, id string, body []byte) {
	switch scheme {
	case ingest.SchemeGitHub:
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	case ingest.SchemeStandard:
		signature.SignRequest(req.Header, [][]byte{key}, id, time.Now(), body)
	}
}

// Sink is a subscriber endpoint that measures end-to-end latency: the time
// from an event's first POST to its first delivery, matched by webhook-id,
// or by each envelope's id in a batch.
type Sink struct {
	// Keys, when set, verify every delivery's signature (Standard
	// Webhooks); one that does not verify is answered 401 and counts
	// nothing.
	Keys [][]byte

	mu    sync.Mutex
	start map[string]time.Time
	seen  map[string]bool
	hist  *hdrhistogram.Histogram
	count atomic.Int64
	all   atomic.Int64
}

// NewSink returns an empty sink.
func NewSink() *Sink {
	return &Sink{start: make(map[string]time.Time), seen: make(map[string]bool), hist: newHistogram()}
}

func (s *Sink) sent(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.start[id]; !ok {
		s.start[id] = at
	}
}

func (s *Sink) delivered() int64 {
	if s == nil {
		return 0
	}
	return s.count.Load()
}

// ServeHTTP records a delivery, each event of a batch, and answers 204.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	now := time.Now()
	if s.Keys != nil {
		if _, err := signature.VerifyRequest(r.Header, s.Keys, body, now, 5*time.Minute); err != nil {
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
	}
	ids := []string{r.Header.Get(signature.HeaderID)}
	if envelopes, err := topics.SplitBatch(body); err == nil {
		ids = ids[:0]
		for _, e := range envelopes {
			var env struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(e, &env) == nil {
				ids = append(ids, env.ID)
			}
		}
	}
	s.all.Add(int64(len(ids)))
	s.mu.Lock()
	for _, id := range ids {
		if at, ok := s.start[id]; ok && !s.seen[id] {
			s.seen[id] = true
			_ = s.hist.RecordValue(max(1, now.Sub(at).Microseconds()))
			s.count.Add(1)
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Deliveries is how many events the sink received: each event of each
// delivery, every subscription's and every repeat.
func (s *Sink) Deliveries() int64 { return s.all.Load() }

// Wait waits until every distinct event sent was delivered, or ctx ends,
// and returns the end-to-end latencies.
func (s *Sink) Wait(ctx context.Context) Percentiles {
	for !s.complete() {
		select {
		case <-ctx.Done():
			return s.summary()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return s.summary()
}

func (s *Sink) complete() bool { return s.Missing() == 0 }

// Missing is how many distinct events sent were not delivered yet.
func (s *Sink) Missing() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.start) - len(s.seen)
}

func (s *Sink) summary() Percentiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarize(s.hist)
}
