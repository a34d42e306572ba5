package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/topics"
)

// The dead-letter pages: both DLQs with stage, error and age, filtered by
// key and time; a letter's headers and body; and a redrive that always
// shows its preview first and copies exactly the letters it showed, over
// the deadletter functions /api/dlq and hookstream dlq call.
//
// Bound: a page reads each DLQ partition from dlqWindow offsets before
// its end when the page was made, to the end (the redrive markers that
// follow a letter are read with it), shows at most dlqShown letters per
// DLQ, and a redrive copies at most dlqRedriveMax letters. When the end
// has moved more than deadletter.MaxPastWithin offsets past a window
// (the DLQ grew after the preview, or a request names old offsets), the
// page or redrive reads nothing and answers 409: preview again.
const (
	dlqWindow     = 1_000
	dlqShown      = 100
	dlqRedriveMax = 500
)

// mountDLQ serves the dead-letter pages.
func (u *Console) mountDLQ(g *echo.Group) {
	u.get(g, "/dlq", u.dlqList, admin.Operators...)
	u.get(g, "/dlq/redrive", u.dlqPreview, admin.Operators...)
	u.post(g, "/dlq/redrive", u.dlqRedrive, admin.Operators...).Changes("dlq.redrive")
	u.get(g, "/dlq/:kind/:partition/:offset", u.dlqLetter, admin.Operators...)
}

// dlqKinds are the DLQs in the order the pages show them.
var dlqKinds = []deadletter.Kind{deadletter.Processor, deadletter.Delivery}

// dlqFilter is the selection of the dead-letter pages, as their URLs hold
// it.
type dlqFilter struct {
	// Kind is processor, delivery, or empty for both.
	Kind string
	// Key is a letter's key, or a prefix ending in *.
	Key string
	// Since is as typed: an RFC 3339 time or a duration back from now.
	Since string
	// since is Since read.
	since time.Time
}

func (u *Console) dlqFilter(r *Request) (dlqFilter, error) {
	f := dlqFilter{Kind: r.FormValue("kind"), Key: strings.TrimSpace(r.FormValue("key")), Since: strings.TrimSpace(r.FormValue("since"))}
	if f.Kind != "" {
		if _, err := deadletter.ParseKind(f.Kind); err != nil {
			return f, err
		}
	}
	if f.Since != "" {
		t, err := events.ParseTime(f.Since, time.Now())
		if err != nil {
			return f, fmt.Errorf("since: %w", err)
		}
		f.since = t
	}
	return f, nil
}

func (f dlqFilter) kinds() []deadletter.Kind {
	if f.Kind == "" {
		return dlqKinds
	}
	return []deadletter.Kind{deadletter.Kind(f.Kind)}
}

// dlqSection is one DLQ's letters.
type dlqSection struct {
	Kind    deadletter.Kind
	Topic   topics.Topic
	Target  topics.Topic
	Letters []deadletter.Letter
	// More says older letters in the window matched too, not shown.
	More bool
}

// dlqData is the dead-letter page.
type dlqData struct {
	Filter   dlqFilter
	Error    string
	Sections []dlqSection
	Window   int
	Shown    int
}

// window is the offsets of the DLQ of kind a page reads: the last
// dlqWindow of each partition.
func (u *Console) window(r *Request, kind deadletter.Kind) (topics.Ranges, error) {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	return topics.Span{Last: dlqWindow}.Ranges(ctx, u.cfg.Cluster.Client, kind.Topic(u.cfg.Cluster.Names))
}

func (u *Console) dlqList(r *Request) error {
	data := dlqData{Window: dlqWindow, Shown: dlqShown}
	f, err := u.dlqFilter(r)
	data.Filter = f
	if err != nil {
		data.Error = err.Error()
		return r.Render(http.StatusBadRequest, "dlq.html", "Dead letters", "dlq", data)
	}
	for _, kind := range f.kinds() {
		within, err := u.window(r, kind)
		if err != nil {
			return err
		}
		letters, err := u.letters(r, kind, deadletter.Filter{Within: within, Key: f.Key, Since: f.since, Limit: dlqShown + 1})
		if err != nil {
			return err
		}
		s := dlqSection{Kind: kind, Topic: kind.Topic(u.cfg.Cluster.Names), Target: kind.Target(u.cfg.Cluster.Names)}
		if len(letters) > dlqShown {
			s.More, letters = true, letters[1:] // the oldest goes
		}
		slices.Reverse(letters) // newest first
		s.Letters = letters
		data.Sections = append(data.Sections, s)
	}
	return r.Render(http.StatusOK, "dlq.html", "Dead letters", "dlq", data)
}

func (u *Console) letters(r *Request, kind deadletter.Kind, f deadletter.Filter) ([]deadletter.Letter, error) {
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	letters, err := u.cfg.DeadLetters.List(ctx, kind, f)
	if errors.Is(err, deadletter.ErrChanged) {
		return nil, echo.NewHTTPError(http.StatusConflict, deadletter.ErrChanged.Error())
	}
	return letters, err
}

// dlqRedriveData is a redrive's preview.
type dlqRedriveData struct {
	Filter dlqFilter
	Kind   deadletter.Kind
	Topic  topics.Topic
	Target topics.Topic
	// Letters are those the redrive copies, Skipped those it skips as
	// already redriven.
	Letters []deadletter.Letter
	Skipped int
	// TooMany says more than Max letters match: none is redriven.
	TooMany bool
	Max     int
	Window  int
	// Within and SinceAt are what Execute sends back: the offsets read
	// and the time Since meant when the preview was made.
	Within  string
	SinceAt string
}

// dlqPreview shows what a redrive of the filter would copy.
func (u *Console) dlqPreview(r *Request) error {
	f, err := u.dlqFilter(r)
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error())
	}
	if f.Kind == "" {
		return echo.NewHTTPError(http.StatusBadRequest, "kind: choose the DLQ to redrive: processor or delivery")
	}
	kind := deadletter.Kind(f.Kind)
	within, err := u.window(r, kind)
	if err != nil {
		return err
	}
	letters, err := u.letters(r, kind, deadletter.Filter{Within: within, Key: f.Key, Since: f.since, Limit: dlqRedriveMax + 1})
	if err != nil {
		return err
	}
	data := dlqRedriveData{Filter: f, Kind: kind, Topic: kind.Topic(u.cfg.Cluster.Names), Target: kind.Target(u.cfg.Cluster.Names),
		Max: dlqRedriveMax, Window: dlqWindow, Within: formatRanges(within)}
	if !f.since.IsZero() {
		data.SinceAt = f.since.UTC().Format(time.RFC3339Nano)
	}
	if len(letters) > dlqRedriveMax {
		data.TooMany = true
	} else {
		for _, l := range letters {
			if l.Redriven {
				data.Skipped++
				continue
			}
			data.Letters = append(data.Letters, l)
		}
	}
	return r.Render(http.StatusOK, "dlq_redrive.html", "Redrive", "dlq", data)
}

// dlqRedrive copies the letters a preview showed: those of its offsets
// that match its filter and no redrive copied yet.
func (u *Console) dlqRedrive(r *Request) error {
	kind, err := deadletter.ParseKind(r.FormValue("kind"))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error())
	}
	r.SetTarget(string(kind))
	within, err := parseRanges(r.FormValue("within"))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "within: "+err.Error())
	}
	f := deadletter.Filter{Within: within, Key: r.FormValue("key"), Limit: dlqRedriveMax + 1}
	if v := r.FormValue("since"); v != "" {
		if f.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	copied, skipped, err := u.cfg.DeadLetters.Redrive(ctx, kind, f)
	if err != nil {
		if errors.Is(err, deadletter.ErrFenced) {
			return echo.NewHTTPError(http.StatusConflict, err.Error())
		}
		if errors.Is(err, deadletter.ErrChanged) {
			return echo.NewHTTPError(http.StatusConflict, deadletter.ErrChanged.Error())
		}
		return err
	}
	msg := fmt.Sprintf("Redriven %d %s to %s", copied, plural(copied, "letter", "letters"), kind.Target(u.cfg.Cluster.Names))
	if skipped > 0 {
		msg += fmt.Sprintf("; %d already redriven, skipped", skipped)
	}
	return r.Redirect(admin.UIPrefix+"/dlq?kind="+string(kind), msg+".")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// formatRanges writes ranges as "partition:from-to" pairs, by partition.
func formatRanges(rs topics.Ranges) string {
	parts := make([]string, 0, len(rs))
	for _, p := range slices.Sorted(maps.Keys(rs)) {
		parts = append(parts, fmt.Sprintf("%d:%d-%d", p, rs[p].From, rs[p].To))
	}
	return strings.Join(parts, ",")
}

// parseRanges reads formatRanges' text, refusing a range wider than
// dlqWindow: a redrive reads no more than its preview could have shown.
func parseRanges(s string) (topics.Ranges, error) {
	rs := make(topics.Ranges)
	if s == "" {
		return rs, nil
	}
	for entry := range strings.SplitSeq(s, ",") {
		ps, span, ok1 := strings.Cut(entry, ":")
		from, to, ok2 := strings.Cut(span, "-")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		f, err2 := strconv.ParseInt(from, 10, 64)
		t, err3 := strconv.ParseInt(to, 10, 64)
		switch {
		case !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || p < 0 || f < 0 || t < f:
			return nil, fmt.Errorf("%q is not partition:from-to", entry)
		case t-f > dlqWindow:
			return nil, fmt.Errorf("%q spans more than %d offsets", entry, dlqWindow)
		}
		if _, dup := rs[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d appears twice", p)
		}
		rs[int32(p)] = topics.Range{From: f, To: t}
	}
	return rs, nil
}

// dlqLetterData is one letter.
type dlqLetterData struct {
	Letter  deadletter.Letter
	Topic   topics.Topic
	EventID string
	Headers [][2]string
}

// dlqLetter shows one letter, its headers and body. Only letters in the
// window of its partition are shown: an older one is read with
// hookstream dlq show.
func (u *Console) dlqLetter(r *Request) error {
	kind, err := deadletter.ParseKind(r.Param("kind"))
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	}
	p, err1 := strconv.ParseInt(r.Param("partition"), 10, 32)
	o, err2 := strconv.ParseInt(r.Param("offset"), 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return echo.NewHTTPError(http.StatusNotFound, "want /ui/dlq/<processor|delivery>/<partition>/<offset>")
	}
	within, err := u.window(r, kind)
	if err != nil {
		return err
	}
	w, ok := within[int32(p)]
	switch {
	case !ok || o >= w.To: // an empty partition leaves no range
		return echo.NewHTTPError(http.StatusNotFound, fmt.Sprintf("no dead letter at %s partition %d offset %d", kind.Topic(u.cfg.Cluster.Names), p, o))
	case o < w.From:
		return echo.NewHTTPError(http.StatusNotFound, fmt.Sprintf(
			"%s partition %d offset %d is older than the newest %d offsets of its partition, which this page reads: hookstream dlq show %d/%d --dlq %s shows it",
			kind.Topic(u.cfg.Cluster.Names), p, o, dlqWindow, p, o, kind))
	}
	letters, err := u.letters(r, kind, deadletter.Filter{Within: topics.Ranges{int32(p): {From: o, To: o + 1}}})
	if err != nil {
		return err
	}
	if len(letters) == 0 {
		return echo.NewHTTPError(http.StatusNotFound, fmt.Sprintf("no dead letter at %s partition %d offset %d", kind.Topic(u.cfg.Cluster.Names), p, o))
	}
	l := letters[0]
	data := dlqLetterData{Letter: l, Topic: kind.Topic(u.cfg.Cluster.Names), EventID: l.Key}
	if kind == deadletter.Delivery {
		if _, id, ok := topics.SplitRetryKey(l.Key, l.Subscription); ok {
			data.EventID = id
		}
	}
	for _, k := range slices.Sorted(maps.Keys(l.Headers)) {
		data.Headers = append(data.Headers, [2]string{k, l.Headers[k]})
	}
	return r.Render(http.StatusOK, "dlq_letter.html", "Dead letter", "dlq", data)
}
