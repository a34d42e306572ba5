package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Steps of --measure: each runs the load at one rate for measureStep,
// then waits for every group to drain; rates rise by measureFactor.
const (
	measureStep   = time.Minute
	measureSteps  = 8
	measureFactor = 1.5
	// A rate is sustained when at least 99% of its requests were
	// accepted and every group drained within measureDrain of the load
	// stopping: the deployment kept up, with at most a few seconds of
	// work in hand.
	measureDrain = 10 * time.Second
)

// measure warms the deployment up, then raises the load step by step with
// no fault and reports the
// highest rate the deployment sustains: the rate the heavy profile's
// load is a fraction of.
func (c *campaign) measure(ctx context.Context) error {
	// Every subscriber answers as it will once faults stop.
	now := time.Now().UnixNano()
	c.subs.byKind[subDead].recoverAt.Store(now)
	c.subs.byKind[subFlap].flapUntil.Store(now)
	rate := c.prof.rate * float64(len(sources))
	// The first minutes of a deployment (groups forming, transactional
	// producers starting, a cluster warming up) are not its pace: the
	// warm-up's load is not measured.
	warm := c.startLoad(ctx, c.prof.rate)
	sleepCtx(ctx, c.prof.warmup)
	warm()
	c.drain(ctx, 2*time.Minute)
	var sustained float64
	fmt.Printf("%-8s %-10s %-10s %-8s %-30s %s\n", "rate/s", "accepted/s", "refused", "drained", "lag at the step's end", "sustained")
	for step := 0; step < measureSteps && ctx.Err() == nil; step++ {
		start := time.Now()
		stop := c.startLoad(ctx, rate/float64(len(sources)))
		sleepCtx(ctx, measureStep)
		lag, err := c.lagByGroup(ctx)
		reports := stop()
		end := time.Now()
		if err != nil {
			return err
		}
		var sent, ok int64
		for _, r := range reports {
			sent += r.Sent
			ok += r.Status["202"] + r.Status["200"]
		}
		drained := c.drain(ctx, 2*time.Minute)
		good := sent > 0 && float64(ok) >= 0.99*float64(sent) && drained >= 0 && drained <= measureDrain
		drain := "no (2m)"
		if drained >= 0 {
			drain = drained.Round(100 * time.Millisecond).String()
		}
		fmt.Printf("%-8.0f %-10.1f %-10d %-8s %-30s %v\n", rate, c.load.rate(start, end), sent-ok, drain, lag, good)
		if !good {
			break
		}
		sustained = rate
		rate *= measureFactor
	}
	fmt.Printf("campaign: sustained %.0f requests/s (the highest rate of a step that kept up)\n", sustained)
	return nil
}

// lagByGroup is `hookstream lag` as "group=lag ..." for the groups
// lagging, the largest first.
func (c *campaign) lagByGroup(ctx context.Context) (string, error) {
	gl, err := lags(ctx, c.bin, c.cliEnv)
	if err != nil {
		return "", err
	}
	sort.Slice(gl, func(i, j int) bool { return gl[i].Total > gl[j].Total })
	paused := string(c.names.SubscriptionGroup(c.subs.byKind[subGone].id))
	var parts []string
	for _, g := range gl {
		if g.Total > 0 && g.Group != paused && len(parts) < 3 {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(g.Group, c.names.Prefix), g.Total))
		}
	}
	if len(parts) == 0 {
		return "0", nil
	}
	return strings.Join(parts, " "), nil
}

// drain polls until every group's lag is 0 and returns how long that
// took, or -1 after timeout.
func (c *campaign) drain(ctx context.Context, timeout time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < timeout && ctx.Err() == nil {
		if lag, err := c.lagByGroup(ctx); err == nil && lag == "0" {
			return time.Since(start)
		}
		sleepCtx(ctx, 500*time.Millisecond) // the CLI itself takes a while; this only spaces the polls
	}
	return -1
}
