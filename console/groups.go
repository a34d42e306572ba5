package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/topics"
)

// The groups pages: lag per group, its partitions folded, and the replay
// planner, over groups.Service as GET /api/groups and POST /api/replay/*
// and the lag and replay commands. Bound: they read offsets, and the
// records they count (groups.Service.Lags, groups.PlanReplay): at most 1 MiB a
// partition and 8 MiB a page, past which counts are in offsets.

// mountGroups serves the groups and replay pages.
func (u *Console) mountGroups(g *echo.Group) {
	u.get(g, "/groups", u.groupList, admin.Readers...)
	u.get(g, "/replay", u.replayPlanner, admin.Readers...)
	u.post(g, "/replay/execute", u.replayExecute, admin.Operators...).Changes("replay.execute")
}

// groupRow is one group as the groups page shows it.
type groupRow struct {
	groups.GroupLag
	// Short is the name replay takes (processor, retry, sub:<id>).
	Short string
	// Subscription is the subscription's id for its group, else empty.
	Subscription string
}

func (u *Console) groupList(r *Request) error {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	lags, err := u.cfg.Groups.Lags(ctx, "")
	if err != nil {
		return err
	}
	rows := make([]groupRow, 0, len(lags))
	for _, g := range lags {
		row := groupRow{GroupLag: g, Short: g.Group}
		switch topics.Group(g.Group) {
		case u.cfg.Cluster.Names.ProcessorGroup():
			row.Short = "processor"
		case u.cfg.Cluster.Names.RetryGroup():
			row.Short = "retry"
		}
		if id, ok := groups.SubscriptionID(u.cfg.Cluster.Names, topics.Group(g.Group)); ok {
			row.Short, row.Subscription = "sub:"+id, id
		}
		rows = append(rows, row)
	}
	return r.Render(http.StatusOK, "groups.html", "Groups", "groups", rows)
}

// replayForm is the planner's form, as the page's URL holds it.
type replayForm struct {
	Group, Target, Value, Topic, Partitions string
}

// replayData is the replay planner.
type replayData struct {
	Form    replayForm
	Targets []string
	// Error is why the form could not be planned.
	Error string
	// Plan is the dry run, when one was made.
	Plan *groups.Replay
}

// replayTargets are the planner's targets, as replay's flags name them.
var replayTargets = []string{groups.TargetEarliest, groups.TargetLatest, groups.TargetTime, groups.TargetDuration, groups.TargetOffsets}

// plan reads the form of r (the URL's query, or the POSTed form) and
// makes the replay of it, executed when execute is set.
func (u *Console) plan(r *Request, execute bool) (replayData, int, error) {
	f := replayForm{
		Group: strings.TrimSpace(r.FormValue("group")), Target: r.FormValue("target"), Value: strings.TrimSpace(r.FormValue("value")),
		Topic: strings.TrimSpace(r.FormValue("topic")), Partitions: strings.TrimSpace(r.FormValue("partitions")),
	}
	data := replayData{Form: f, Targets: replayTargets}
	if f.Group == "" || f.Target == "" {
		if execute {
			return data, http.StatusBadRequest, errors.New("choose a group and a target")
		}
		return data, http.StatusOK, nil
	}
	t, err := groups.ParseTarget(f.Target, f.Value)
	if err != nil {
		return data, http.StatusBadRequest, err
	}
	parts, err := parsePartitions(f.Partitions)
	if err != nil {
		return data, http.StatusBadRequest, err
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	plan, err := u.cfg.Groups.Replay(ctx, f.Group, f.Topic, parts, t, execute)
	if err != nil {
		return data, admin.Status(err), err
	}
	data.Plan = &plan
	return data, http.StatusOK, nil
}

// parsePartitions reads "0, 3,5" as replay's --partition flags.
func parsePartitions(s string) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	var out []int32
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || n < 0 {
			return nil, errors.New("partitions: " + strconv.Quote(strings.TrimSpace(p)) + " is not a partition number (want 0, 3, 5)")
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// replayPlanner shows the planner, and the dry run of its form.
func (u *Console) replayPlanner(r *Request) error {
	data, status, err := u.plan(r, false)
	if err != nil {
		if status == 0 {
			return err // not the form's fault: the error page
		}
		data.Error = err.Error()
	}
	return r.Render(status, "replay.html", "Replay", "groups", data)
}

// replayExecute carries a plan out, where hookstream replay --execute
// would, and says what followed: refused (409) while the group has active
// members.
func (u *Console) replayExecute(r *Request) error {
	r.SetTarget(strings.TrimSpace(r.FormValue("group")))
	data, status, err := u.plan(r, true)
	if err != nil {
		if status == 0 {
			return err
		}
		data.Error = err.Error()
		return r.Render(status, "replay.html", "Replay", "groups", data)
	}
	return r.Redirect(admin.UIPrefix+"/groups", data.Plan.Outcome)
}
