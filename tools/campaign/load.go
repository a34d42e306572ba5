package main

import (
	"maps"
	"net/http"
	"path"
	"sort"
	"strconv"
	"sync"
	"time"
)

// recorder is the load's HTTP transport: it notes, per event key, the
// first time an ingest instance answered 202 (accepted) or 200
// (duplicate), the answers by status, and accepted requests per second.
type recorder struct {
	base  http.RoundTripper
	start time.Time

	mu       sync.Mutex
	accepted map[string]time.Time
	order    []acceptance // in answer order
	status   map[string]int64
	errors   int64
	perSec   []int64 // 2xx answers by second since start
}

type acceptance struct {
	key string
	at  time.Time
}

func newRecorder() *recorder {
	return &recorder{
		base:     &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		start:    time.Now(),
		accepted: make(map[string]time.Time),
		status:   make(map[string]int64),
	}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		return resp, err
	}
	r.status[strconv.Itoa(resp.StatusCode)]++
	if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK {
		key := path.Base(req.URL.Path) + ":" + req.Header.Get("X-Event-ID")
		if _, ok := r.accepted[key]; !ok {
			r.accepted[key] = now
			r.order = append(r.order, acceptance{key, now})
		}
		sec := int(now.Sub(r.start) / time.Second)
		for len(r.perSec) <= sec {
			r.perSec = append(r.perSec, 0)
		}
		r.perSec[sec]++
	}
	return resp, nil
}

// acceptedAt returns when each key was first accepted.
func (r *recorder) acceptedAt() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.accepted)
}

// keys returns every accepted key, sorted.
func (r *recorder) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.accepted))
	for k := range r.accepted {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// acceptedSince returns up to n keys first accepted after t, newest first.
func (r *recorder) acceptedSince(t time.Time, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i := len(r.order) - 1; i >= 0 && len(out) < n; i-- {
		if r.order[i].at.Before(t) {
			break
		}
		out = append(out, r.order[i].key)
	}
	return out
}

// rate is the mean of 2xx answers per second over the whole seconds
// that [from, to) touches.
func (r *recorder) rate(from, to time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, b := int(from.Sub(r.start)/time.Second), int((to.Sub(r.start)+time.Second-1)/time.Second)
	if b <= a {
		return 0
	}
	var sum int64
	for s := a; s < b && s < len(r.perSec); s++ {
		if s >= 0 {
			sum += r.perSec[s]
		}
	}
	return float64(sum) / float64(b-a)
}

func (r *recorder) snapshot() (map[string]int64, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := make(map[string]int64, len(r.status))
	for k, v := range r.status {
		st[k] = v
	}
	return st, r.errors
}
