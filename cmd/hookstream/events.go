package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

func newEventsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow an event: its whole story from the ledger",
	}
	cmd.AddCommand(newEventsGetCommand(), newEventsTailCommand(), newEventsSearchCommand(), newEventsResendCommand(), newEventsPullCommand())
	return cmd
}

// eventFilter selects events records by the source and type headers the
// processor writes, as a subscription's globs do, and with --subscription
// as that subscription decides (its globs, then its filter).
type eventFilter struct {
	flags subscriptions.Subscription // --source and --type
	sub   *subscriptions.Compiled    // --subscription, if any
}

// addFilterFlags adds --source, --type and, when sub is not nil,
// --subscription.
func addFilterFlags(cmd *cobra.Command, source, typ, sub *string) {
	cmd.Flags().StringVar(source, "source", "", "only events of this source (a glob)")
	cmd.Flags().StringVar(typ, "type", "", "only events of this type (a glob: 'push', 'checkout.*')")
	if sub != nil {
		cmd.Flags().StringVar(sub, "subscription", "", "only events this subscription receives (its source and type globs, then its filter)")
	}
}

// newEventFilter checks the flags and reads the subscription, if named.
func newEventFilter(ctx context.Context, c cluster, source, typ, sub string) (*eventFilter, error) {
	f := &eventFilter{}
	for flag, v := range map[string]string{"source": source, "type": typ} {
		if _, err := path.Match(v, ""); err != nil {
			return nil, fmt.Errorf("--%s: invalid glob %q", flag, v)
		}
	}
	if source != "" {
		f.flags.Sources = []string{source}
	}
	if typ != "" {
		f.flags.EventTypes = []string{typ}
	}
	if sub != "" {
		s, err := subscriptions.NewRegistry(c.Cluster, c.log).Get(ctx, sub)
		if err != nil {
			return nil, fmt.Errorf("--subscription: %w", err)
		}
		f.sub = subscriptions.Compile(s)
	}
	return f, nil
}

func (f *eventFilter) match(r *kgo.Record) bool {
	h := func(key string) string {
		for _, hd := range r.Headers {
			if hd.Key == key {
				return string(hd.Value)
			}
		}
		return ""
	}
	source, typ := h(topics.HeaderSource), h(topics.HeaderEventType)
	return f.flags.Matches(source, typ) && (f.sub == nil || f.sub.Match(subscriptions.NewEvent(r)).Match)
}

// printEvent prints one events record: a line of the table (written at,
// id, type, partition/offset), or the envelope as one JSON line.
func printEvent(w io.Writer, output string, r *kgo.Record) error {
	if output == "json" {
		_, err := fmt.Fprintf(w, "%s\n", oneLine(r.Value))
		return err
	}
	at := r.Timestamp.UTC().Format(time.RFC3339Nano)
	env, err := topics.ParseEnvelope(r.Value)
	if err != nil {
		_, err = fmt.Fprintf(w, "%s\t%s\t(not an envelope: %v)\n", at, r.Key, err)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d\n", at, env.ID, env.Type, r.Partition, r.Offset)
	return err
}

// printRecord prints one record of any topic: a line (written at, key,
// headers as name=value, partition/offset) and its value on the next, or
// one JSON line with the key, headers, value (as JSON when it is JSON),
// partition, offset and written_at.
func printRecord(w io.Writer, output string, r *kgo.Record) error {
	if output == "json" {
		headers := make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		value := json.RawMessage(r.Value)
		if !json.Valid(r.Value) {
			value, _ = json.Marshal(string(r.Value)) // a string: cannot fail
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(map[string]any{"key": string(r.Key), "headers": headers, "value": value,
			"partition": r.Partition, "offset": r.Offset, "written_at": r.Timestamp.UTC()})
	}
	headers := make([]string, 0, len(r.Headers))
	for _, h := range r.Headers {
		headers = append(headers, h.Key+"="+string(h.Value))
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d\n%s\n", r.Timestamp.UTC().Format(time.RFC3339Nano), r.Key, strings.Join(headers, " "), r.Partition, r.Offset, oneLine(r.Value))
	return err
}

// oneLine is value on one line: compacted when it is JSON (an envelope
// keeps its payload's indentation, newlines included), else as it is.
func oneLine(value []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, value) != nil {
		return value
	}
	return b.Bytes()
}

// eventsTailOptions are the flags of events tail.
type eventsTailOptions struct {
	output, source, typ, sub, topic string
}

func newEventsTailCommand() *cobra.Command {
	o := &eventsTailOptions{}
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Follow the events topic, or a topic subscription's topic, and print each record as it commits",
		Long: `Follows <prefix>.events from its end, read_committed (an event shows once its
transaction commits, never an aborted one), and prints each envelope that
passes the filters: a line (written at, id, type, partition/offset), or with
--output json the envelope, one a line.

With --topic NAME it follows topic NAME instead, such as the topic a topic
subscription writes (subscriptions add --topic NAME), and prints each record
that passes --source and --type (its hs-source and hs-event-type headers): a
line with its time, key, headers and partition/offset, then its value (the
envelope or the subscription's transform result); or with --output json one
object a line: key, headers, value, partition, offset, written_at.

Stops on Ctrl-C, with exit status 0.`,
		Example: `  hookstream events tail
  hookstream events tail --source github --type 'pull_request*'
  hookstream events tail --subscription sub_abc --output json | jq .data
  hookstream events tail --topic billing.invoices`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEventsTail(cmd, o) },
	}
	addFilterFlags(cmd, &o.source, &o.typ, &o.sub)
	cmd.Flags().StringVar(&o.topic, "topic", "", "follow this topic instead of the events topic, such as a topic subscription's")
	addOutputFlag(cmd, &o.output)
	config.RegisterFlags(cmd.Flags(), config.Common)
	return cmd
}

// runEventsTail follows the events topic, or o.topic, from its end and
// prints each committed record that passes the filters, until the context
// ends (Ctrl-C), which is no error.
func runEventsTail(cmd *cobra.Command, o *eventsTailOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.topic != "" && o.sub != "" {
		return errors.New("--subscription and --topic: a topic subscription's topic holds what it receives already; give one of them")
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		err := followTopic(ctx, c, cmd.OutOrStdout(), o)
		if ctx.Err() != nil {
			return nil // Ctrl-C, whatever it interrupted
		}
		return err
	})
}

// followTopic prints the records of o's topic that commit from now on and
// pass its filters, until ctx ends or an error.
func followTopic(ctx context.Context, c cluster, w io.Writer, o *eventsTailOptions) error {
	filter, err := newEventFilter(ctx, c, o.source, o.typ, o.sub)
	if err != nil {
		return err
	}
	topic, show := string(c.Names.Events), printEvent
	if o.topic != "" {
		if err := mustExist(ctx, c, o.topic); err != nil {
			return err
		}
		topic, show = o.topic, printRecord
	}
	rd, err := c.NewClient(
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer rd.Close()
	for {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var werr error
		fs.EachRecord(func(r *kgo.Record) {
			if werr == nil && filter.match(r) {
				werr = show(w, o.output, r)
			}
		})
		if werr != nil {
			return werr
		}
	}
}

// mustExist is an error unless the cluster has topic.
func mustExist(ctx context.Context, c cluster, topic string) error {
	listed, err := c.Admin().ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	if !listed.Has(topic) {
		return fmt.Errorf("no topic %s: give the topic a topic subscription writes (hookstream subscriptions list shows each destination)", topic)
	}
	return nil
}

// eventsSearchOptions are the flags of events search.
type eventsSearchOptions struct {
	output, source, typ, since, until string
	limit                             int
}

func newEventsSearchCommand() *cobra.Command {
	o := &eventsSearchOptions{}
	cmd := &cobra.Command{
		Use:   "search --since T",
		Short: "Print the events of a time range that match the filters",
		Long: `Scans <prefix>.events, read_committed, from the first record written at or
after --since (Kafka's offsets by time) to --until (default: now), and prints
the events that pass the filters in the order they were written (their
records' times, merged across partitions), at most --limit: the earliest of
the range. hookstream's own operational events (source hookstream) match the
filters like any other. When the limit stops the search, the table's last
line says so, and with --output json a line on stderr. When stderr is a
terminal a progress line shows how much is scanned.`,
		Example: `  hookstream events search --since 1h --source stripe
  hookstream events search --since 2026-11-21T09:00:00Z --until 2026-11-21T10:00:00Z --type 'invoice.*' --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEventsSearch(cmd, o) },
	}
	addFilterFlags(cmd, &o.source, &o.typ, nil)
	cmd.Flags().StringVar(&o.since, "since", "", "start of the range: an RFC 3339 time, or a duration back from now (2h)")
	cmd.Flags().StringVar(&o.until, "until", "", "end of the range (default: now)")
	cmd.Flags().IntVar(&o.limit, "limit", 100, "print at most this many events")
	addOutputFlag(cmd, &o.output)
	config.RegisterFlags(cmd.Flags(), config.Common)
	return cmd
}

// runEventsSearch prints the events of the range that pass the filters,
// at most o.limit, found by events.Service.Scan as the admin API's search finds
// them, without its bound on the records read.
func runEventsSearch(cmd *cobra.Command, o *eventsSearchOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.since == "" {
		return errors.New("--since: required (an RFC 3339 time or a duration back from now, such as 2h)")
	}
	if o.limit < 1 {
		return fmt.Errorf("--limit: %d is not a positive number", o.limit)
	}
	now := time.Now()
	q := events.Query{Source: o.source, Type: o.typ, Limit: o.limit}
	var err error
	if q.Since, err = timeFlag("since", o.since, now); err != nil {
		return err
	}
	q.Until = now
	if o.until != "" {
		if q.Until, err = timeFlag("until", o.until, now); err != nil {
			return err
		}
	}
	if !q.Since.Before(q.Until) {
		return errors.New("--since: must be before --until")
	}
	if err := q.Check(); err != nil {
		return flagError(err)
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		w := cmd.OutOrStdout()
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if o.output == "table" {
			fmt.Fprintln(tw, "WRITTEN AT\tID\tTYPE\tPARTITION/OFFSET")
			w = tw
		}
		progress := progressLine(cmd.ErrOrStderr())
		found := 0
		page, err := events.New(c.Cluster, nil, nil).Scan(ctx, q, func(r *kgo.Record) error {
			found++
			return printEvent(w, o.output, r)
		}, progress)
		progress(-1, 0)
		if err != nil {
			return err
		}
		stopped := ""
		if page.Left > 0 {
			stopped = fmt.Sprintf("stopped at --limit %d: %d offsets of the range after the last event printed are unread; raise --limit or narrow the range to see them", o.limit, page.Left)
		}
		if o.output == "json" {
			if stopped != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "hookstream:", stopped)
			}
			return nil
		}
		fmt.Fprintf(tw, "\n%d events", found)
		if stopped != "" {
			fmt.Fprintf(tw, " (%s)", stopped)
		}
		fmt.Fprintln(tw)
		return tw.Flush()
	})
}

// flagError names the flag of a query's error, as the API names its
// parameter: "source: invalid glob" is --source's.
func flagError(err error) error {
	return fmt.Errorf("--%w", err)
}

// progressLine returns a function that shows, on w when it is a terminal,
// how many of total offsets are scanned; a read of -1 clears the line.
func progressLine(w io.Writer) func(read, total int64) {
	f, ok := w.(*os.File)
	if st, err := f.Stat(); !ok || err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func(int64, int64) {}
	}
	return func(read, total int64) {
		if read < 0 {
			fmt.Fprint(w, "\r\033[K")
			return
		}
		if total == 0 {
			return
		}
		const width = 30
		done := int(min(read, total) * width / total)
		fmt.Fprintf(w, "\r[%s%s] %d/%d offsets", strings.Repeat("#", done), strings.Repeat(" ", width-done), read, total)
	}
}

func newEventsGetCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get <source>:<event-id>",
		Short: "Show an event's whole story: received, processed or failed, duplicates, replays, every delivery",
		Long: `Shows what hookstream knows of one event, in time order, from the ledger the
processors keep: when ingest received it, when it was processed (its place in
the ingest and events topics) or why it failed, the duplicates dropped and the
replays, and per subscription its recent attempts and where the event is now:
delivered, retrying at a time, dead-lettered, or waiting on a disabled
subscription.

It asks the admin API of a running hookstream (--admin-addr, with
--admin-token when it has one); any instance answers, forwarding to the
processor that owns the event's partition when the instances share
HOOKSTREAM_ADMIN_TOKEN, which authenticates them to each other. An event is
remembered for HOOKSTREAM_DEDUP_TTL.`,
		Example: `  hookstream events get github:72d3162e
  hookstream events get stripe:evt_1Nq --admin-addr 10.0.0.5:8081 --admin-token "$HOOKSTREAM_ADMIN_TOKEN" --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runEventsGet(cmd, output, args[0]) },
	}
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// runEventsGet asks the admin API for the story of event id
// (<source>:<event-id>) and prints it.
func runEventsGet(cmd *cobra.Command, output, id string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	if !strings.Contains(id, ":") {
		return fmt.Errorf("event %q: want <source>:<event-id>, as ingest answered it (\"id\")", id)
	}
	cfg, err := config.Load(cmd.Flags(), os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
	defer cancel()
	raw, err := adminGet(ctx, cfg, "/api/events/"+url.PathEscape(id))
	if err != nil {
		return err
	}
	if output == "json" {
		_, err := cmd.OutOrStdout().Write(raw)
		return err
	}
	var s events.Story
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("admin API answered something other than a story: %w", err)
	}
	return printStory(cmd.OutOrStdout(), s)
}

// adminGet asks the admin API of a running hookstream for path.
func adminGet(ctx context.Context, cfg *config.Config, path string) ([]byte, error) {
	return adminCall(ctx, cfg, http.MethodGet, path, nil)
}

func newEventsResendCommand() *cobra.Command {
	var (
		output, sub string
		force       bool
	)
	cmd := &cobra.Command{
		Use:   "resend <source>:<event-id> --subscription ID",
		Short: "Deliver one event to one subscription again, now, with fresh attempts",
		Long: `Delivers the event to the subscription again, now: its record is read where
its story says it is on the events topic and handed to the dispatcher through
the delivery-retry topic, due at once, as a new delivery (attempt 1, then the
subscription's retry schedule and, at its end, the delivery DLQ). The
subscriber receives it with its usual webhook-id, so it can recognise it; the
event's story (events get) shows the attempts as a resend's.

Refused: an event the ledger no longer holds (HOOKSTREAM_DEDUP_TTL), one that
failed processing (redrive it from the DLQ), one whose record is past the
events topic's retention, and an unknown subscription; and, unless --force,
a subscription that would not receive the event (its sources, event types or
filter) or that is disabled (with --force the resend waits until it is
enabled).

It asks the admin API of a running hookstream (--admin-addr, with
--admin-token when it has one), which finds the event's story as events get
does.`,
		Example: `  hookstream events resend github:72d3162e --subscription sub_abc
  hookstream events resend stripe:evt_1Nq --subscription sub_ops --force --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEventsResend(cmd, output, args[0], events.ResendRequest{Subscription: sub, Force: force})
		},
	}
	cmd.Flags().StringVar(&sub, "subscription", "", "the subscription to deliver the event to (required)")
	cmd.Flags().BoolVar(&force, "force", false, "resend even to a subscription that would not receive the event, or is disabled")
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// runEventsResend asks the admin API to resend event id to a subscription.
func runEventsResend(cmd *cobra.Command, output, id string, req events.ResendRequest) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	if !strings.Contains(id, ":") {
		return fmt.Errorf("event %q: want <source>:<event-id>, as ingest answered it (\"id\")", id)
	}
	if req.Subscription == "" {
		return errors.New("--subscription: required (the id of the subscription to resend to)")
	}
	cfg, err := config.Load(cmd.Flags(), os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
	defer cancel()
	raw, err := adminCall(ctx, cfg, http.MethodPost, "/api/events/"+url.PathEscape(id)+"/resend", req)
	if err != nil {
		return err
	}
	if output == "json" {
		_, err := cmd.OutOrStdout().Write(raw)
		return err
	}
	var r events.Resent
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("admin API answered something other than a resend: %w", err)
	}
	w := cmd.OutOrStdout()
	for _, f := range r.Forced {
		fmt.Fprintf(w, "forced: %s\n", f)
	}
	if r.Waiting {
		_, err = fmt.Fprintf(w, "resend of %s to %s written: it waits until the subscription is enabled\n", r.Event, r.Subscription)
		return err
	}
	_, err = fmt.Fprintf(w, "resend of %s to %s written, due now as attempt 1 (events record %d/%d); hookstream events get %s follows it\n",
		r.Event, r.Subscription, r.Partition, r.Offset, r.Event)
	return err
}

// printStory prints a story as a time-ordered table, then where each
// delivery stands.
func printStory(w io.Writer, s events.Story) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "EVENT %s  status %s, remembered until %s\n", s.ID, s.Status, s.ExpiresAt.Format(time.RFC3339))
	if s.TraceID != "" {
		fmt.Fprintln(tw, strings.TrimSpace("TRACE "+s.TraceID+"  "+s.TraceURL))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TIME\tWHAT")
	for _, step := range s.Timeline() {
		fmt.Fprintf(tw, "%s\t%s\n", step.At.UTC().Format(topics.TimeFormat), step.What)
	}
	fmt.Fprintln(tw, "\nSUBSCRIPTION\tNOW\tATTEMPTS\tLAST STATUS")
	for _, d := range s.Deliveries {
		now := d.State
		if d.DueAt != nil && d.State == "retrying" {
			now += " at " + d.DueAt.UTC().Format(time.RFC3339)
		}
		status := "-" // no HTTP answer: a timeout, or a topic write or pull acknowledgment
		if d.Status != 0 {
			status = strconv.Itoa(d.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", d.Subscription, now, d.Attempts, status)
	}
	if len(s.Deliveries) == 0 && s.Omitted == 0 {
		fmt.Fprintln(tw, "(no delivery attempt yet)")
	}
	if s.Omitted > 0 {
		fmt.Fprintf(tw, "(and %d less recently attempted subscriptions, omitted: a story keeps the %d most recently attempted)\n", s.Omitted, statestore.MaxDeliveries)
	}
	return tw.Flush()
}
