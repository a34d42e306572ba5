package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/subscriptions"
)

// overviewData is the overview page.
type overviewData struct {
	Sources []sourceRow
	// Receiver is false when this instance runs no receiver: then
	// rejected requests, and duplicates it answered, are not known here.
	Receiver bool

	// ProcessorLag is the processor group's lag as groups.Amount writes
	// it: events, or "≤ N offsets" past the counting bound.
	ProcessorLag     string
	ProcessorLagUnit groups.Unit
	ProcessorLagErr  string
	Restoring        []int32
	ProcessorHere    bool

	ProcessorDLQ, DeliveryDLQ int64
	// Counting, when the tallies had not read everything written before
	// the request in the time it waits for them, says how much they had.
	Counting string

	Subscriptions int
	// Health are the subscriptions by health state, with their reasons.
	Health        map[string][]healthRow
	CircuitsKnown bool

	Readiness admin.Readiness
	// Instances are the deployment's, as GET /api/instances lists them.
	Instances    instances.List
	InstancesErr string
}

// sourceRow is one source's last chartMinutes minutes.
type sourceRow struct {
	Name                                            string
	Accepted, Duplicates, Rejected                  int64
	AcceptedSeries, DuplicateSeries, RejectedSeries []int64
}

// healthRow is a subscription in the overview's count of its health.
type healthRow struct {
	ID, Reason string
}

// processorDetail is what the overview reads of the processor's check.
type processorDetail struct {
	Restoring []int32 `json:"restoring"`
}

func processorOf(r admin.Readiness) (processorDetail, bool) {
	c, ok := r.Checks["processor"]
	if !ok {
		return processorDetail{}, false
	}
	var d processorDetail
	b, err := json.Marshal(c.Detail)
	if err == nil {
		_ = json.Unmarshal(b, &d) // a detail without these fields leaves them empty
	}
	return d, true
}

func (u *Console) overview(r *Request) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	now := time.Now()
	var out overviewData
	var err error
	if out.Counting, err = u.catchUp(ctx, u.cfg.Stats, u.cfg.Attempts); err != nil {
		return err
	}
	out.Sources, out.Receiver = u.sourceRows(now)
	for _, c := range u.cfg.Stats.Sources() {
		out.ProcessorDLQ += c.Failed
	}
	out.DeliveryDLQ = u.cfg.Attempts.Sum().DeadLettered

	readyCtx, readyCancel := context.WithTimeout(ctx, 3*time.Second)
	out.Readiness = u.srv.Readiness(readyCtx)
	readyCancel()
	if d, ok := processorOf(out.Readiness); ok {
		out.ProcessorHere, out.Restoring = true, d.Restoring
	}
	d, known := subscriptions.DeliveryOf(out.Readiness)
	out.CircuitsKnown = known

	subs, err := u.cfg.Subscriptions.List(ctx)
	if err != nil {
		return err
	}
	out.Subscriptions = len(subs)
	out.Health = make(map[string][]healthRow)
	for _, id := range sortedIDs(subs) {
		h := d.Health(subs[id], known)
		out.Health[h.State] = append(out.Health[h.State], healthRow{ID: id, Reason: h.Reason})
	}

	if out.Instances, err = u.cfg.Instances.Discover(ctx, instances.SelfOf(u.srv)); err != nil {
		out.InstancesErr = err.Error()
	}
	lag, err := u.cfg.Groups.Lags(ctx, "processor")
	switch {
	case err != nil:
		out.ProcessorLagErr = err.Error()
	case len(lag) == 1:
		out.ProcessorLag, out.ProcessorLagUnit = lag[0].TotalText(), lag[0].Unit
	default:
		out.ProcessorLagErr = fmt.Sprintf("%d groups answered for the processor", len(lag))
	}
	return r.Render(http.StatusOK, "overview.html", "Overview", "overview", out)
}

// sourceRows are the sources' counts per minute: accepted and the
// duplicates the processor dropped, deployment-wide, by record time; the
// duplicates this instance's receiver answered itself and the requests it
// rejected, when it runs one.
func (u *Console) sourceRows(now time.Time) ([]sourceRow, bool) {
	recent := u.cfg.Stats.Recent(now)
	answers, receiver := u.receiver.series(now)
	rows := make(map[string]*sourceRow)
	row := func(name string) *sourceRow {
		if rows[name] == nil {
			rows[name] = &sourceRow{Name: name, AcceptedSeries: make([]int64, chartMinutes),
				DuplicateSeries: make([]int64, chartMinutes), RejectedSeries: make([]int64, chartMinutes)}
		}
		return rows[name]
	}
	for name, series := range recent {
		if name == "" {
			continue // records that name no source
		}
		sr := row(name)
		for i, c := range series {
			sr.AcceptedSeries[i] += c.Accepted
			sr.DuplicateSeries[i] += c.Duplicates()
		}
	}
	for name, series := range answers {
		sr := row(name)
		for i, a := range series {
			sr.DuplicateSeries[i] += a.Duplicates
			sr.RejectedSeries[i] += a.Rejected
		}
	}
	out := make([]sourceRow, 0, len(rows))
	for _, sr := range rows {
		for i := range chartMinutes {
			sr.Accepted += sr.AcceptedSeries[i]
			sr.Duplicates += sr.DuplicateSeries[i]
			sr.Rejected += sr.RejectedSeries[i]
		}
		if sr.Accepted+sr.Duplicates+sr.Rejected > 0 {
			out = append(out, *sr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, receiver
}

func sortedIDs(subs map[string]subscriptions.Subscription) []string {
	ids := make([]string, 0, len(subs))
	for id := range subs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// defaultTallyWait is how long a page waits for the tallies when
// Config.TallyWait is 0.
const defaultTallyWait = time.Second

// progressWait is how long a page waits, after the tallies, for the
// offsets that say how far they read; past it the page says so without
// figures.
const progressWait = time.Second

// tally is what a page reads its counts from: a topics.Follower.
type tally interface {
	CatchUp(context.Context) error
	Progress(context.Context) (read, total int64, err error)
}

// catchUp asks the tallies to read what was written before, and waits
// for them at most Config.TallyWait. When they have not caught up by then
// it returns what the page says of the counts it shows: how many of the
// topics' records they cover. The tallies keep reading after the request
// (a follower reads for a minute after it was last asked), so a reload a
// moment later shows more.
func (u *Console) catchUp(ctx context.Context, ts ...tally) (string, error) {
	wait := u.cfg.TallyWait
	if wait <= 0 {
		wait = defaultTallyWait
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	errs := make(chan error, len(ts))
	for _, t := range ts {
		go func() { errs <- t.CatchUp(waitCtx) }()
	}
	behind := false
	for range ts {
		if err := <-errs; err != nil {
			if waitCtx.Err() == nil || ctx.Err() != nil {
				return "", err
			}
			behind = true
		}
	}
	if !behind {
		return "", nil
	}
	// Asking how far they read waits at most progressWait: a broker busy
	// serving the tallies can be slow to answer.
	progressCtx, cancelProgress := context.WithTimeout(ctx, progressWait)
	defer cancelProgress()
	var read, total int64
	for _, t := range ts {
		r, n, err := t.Progress(progressCtx)
		if err != nil {
			if progressCtx.Err() == nil || ctx.Err() != nil {
				return "", err
			}
			return "Still counting: the figures cover part of the topics' records; reload in a moment.", nil
		}
		read, total = read+r, total+n
	}
	if read >= total {
		return "", nil // caught up since
	}
	return fmt.Sprintf("Still counting: the figures cover %s of the topics' %s records (%d%%); reload in a moment.",
		thousands(read), thousands(total), read*100/total), nil
}

// thousands writes n with a comma between each three digits.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
