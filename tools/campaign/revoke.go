package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The revoker makes a viewer token through the admin API of one instance
// with the bootstrap token every tokenEvery and revokes it through
// another, while the faults run; each second it asks an instance's API
// with a revoked token: on even seconds the newest, which it reaches 2 to
// 8 s after its revocation, on odd ones the older ones in turn, which
// restarts must not bring back. DESIGN has a revoked token refused on
// every instance within revocationBound (invariant 9).
const (
	tokenEvery      = 10 * time.Second
	revocationBound = 5 * time.Second
	// probePath is what a probe asks: a cheap read every role but team
	// may make.
	probePath = "/api/instances"
)

// probe is one request with a revoked token.
type probe struct {
	Token    string    `json:"token"` // its id
	Instance string    `json:"instance"`
	Sent     time.Time `json:"sent"`
	Status   int       `json:"status"` // 0: no answer
}

// revoker makes, revokes and probes tokens (the constants above).
type revoker struct {
	bootstrap string
	instances []*proc
	client    *http.Client

	mu sync.Mutex
	// revoked is when each token's revocation was answered, by id.
	revoked map[string]time.Time
	probes  []probe
	// failed counts the makings and revocations that got no answer (an
	// instance down): no invariant, a line of the summary.
	failed int
}

func newRevoker(bootstrap string, instances []*proc) *revoker {
	return &revoker{bootstrap: bootstrap, instances: instances, revoked: make(map[string]time.Time),
		client: &http.Client{Timeout: 2 * time.Second}}
}

// issued is a token made and not yet probed as revoked.
type issued struct{ id, secret string }

// run makes, revokes and probes tokens until ctx ends.
func (r *revoker) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		secrets []issued // revoked tokens, the newest last
		n       int
	)
	for ; ctx.Err() == nil; n++ {
		if n%int(tokenEvery/time.Second) == 0 {
			if t, ok := r.cycle(ctx, n); ok {
				secrets = append(secrets, t)
			}
		} else if len(secrets) > 0 {
			t := secrets[len(secrets)-1]
			if n%2 == 1 {
				t = secrets[(n/2)%len(secrets)]
			}
			r.probe(ctx, t, r.instances[n%len(r.instances)])
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// cycle makes the nth token through one instance and revokes it through
// the next.
func (r *revoker) cycle(ctx context.Context, n int) (issued, bool) {
	var made struct{ ID, Token string }
	body := fmt.Sprintf(`{"name":"campaign-%d","role":"viewer"}`, n)
	status, raw := r.call(ctx, r.instances[n%len(r.instances)], r.bootstrap, http.MethodPost, "/api/tokens", body)
	if status != http.StatusCreated || json.Unmarshal(raw, &made) != nil {
		r.fail()
		return issued{}, false
	}
	if status, _ := r.call(ctx, r.instances[(n+1)%len(r.instances)], r.bootstrap, http.MethodDelete, "/api/tokens/"+url.PathEscape(made.ID), ""); status != http.StatusNoContent {
		// Not known to be revoked: never probed.
		r.fail()
		return issued{}, false
	}
	r.mu.Lock()
	r.revoked[made.ID] = time.Now()
	r.mu.Unlock()
	return issued{made.ID, made.Token}, true
}

func (r *revoker) fail() {
	r.mu.Lock()
	r.failed++
	r.mu.Unlock()
}

// probe asks p's API with the revoked token t and records the answer.
func (r *revoker) probe(ctx context.Context, t issued, p *proc) {
	sent := time.Now()
	status, _ := r.call(ctx, p, t.secret, http.MethodGet, probePath, "")
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	r.probes = append(r.probes, probe{Token: t.id, Instance: p.name, Sent: sent, Status: status})
	r.mu.Unlock()
}

// call sends method path with body (JSON when not empty) to p's admin
// API with token and returns the status (0: no answer) and the answer.
func (r *revoker) call(ctx context.Context, p *proc, token, method, path, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.adminAddr+path, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	return resp.StatusCode, raw
}

// check is invariant 9 over what was recorded so far.
func (r *revoker) check() revocationCheck {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := checkRevocations(r.revoked, r.probes)
	c.Failed = r.failed
	return c
}

// revocationCheck is invariant 9's verdict.
type revocationCheck struct {
	Tokens int `json:"tokens_revoked"`
	Probes int `json:"probes"`
	// Tested counts the probes answered more than revocationBound after
	// their token's revocation: those that test the invariant.
	Tested int `json:"probes_past_bound"`
	// Late names the probes of them that were accepted (2xx).
	Late []string `json:"accepted_past_bound,omitempty"`
	// Failed counts the makings and revocations that got no answer.
	Failed int `json:"token_calls_unanswered"`
}

// checkRevocations is invariant 9: no probe sent more than
// revocationBound after its token's revocation (revoked: when it was
// answered, by token id) was accepted. A probe unanswered or answered
// 5xx tests nothing.
func checkRevocations(revoked map[string]time.Time, probes []probe) revocationCheck {
	c := revocationCheck{Tokens: len(revoked), Probes: len(probes)}
	for _, p := range probes {
		at, ok := revoked[p.Token]
		after := p.Sent.Sub(at)
		if !ok || after <= revocationBound || p.Status == 0 || p.Status >= 500 {
			continue
		}
		c.Tested++
		if p.Status < 300 {
			c.Late = append(c.Late, fmt.Sprintf("token %s accepted by %s %s after its revocation (answered %d)",
				p.Token, p.Instance, after.Round(100*time.Millisecond), p.Status))
		}
	}
	return c
}
