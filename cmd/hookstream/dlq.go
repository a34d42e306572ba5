package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/topics"
)

// dlqSelection are the flags that select letters.
type dlqSelection struct {
	since, key     string
	partition      int32
	fromOff, toOff int64
	limit          int
	all            bool // redrive only
}

func (s *dlqSelection) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&s.since, "since", "", "letters that failed since an RFC 3339 time or for a duration (2h, 30m)")
	fs.StringVar(&s.key, "key", "", "letters with this key, or with this prefix when it ends in * (github:*, sub_abc:*)")
	fs.Int32Var(&s.partition, "partition", 0, "letters of one DLQ partition")
	fs.Int64Var(&s.fromOff, "from-offset", 0, "first offset, within --partition")
	fs.Int64Var(&s.toOff, "to-offset", 0, "last offset (inclusive), within --partition")
	fs.IntVar(&s.limit, "limit", 0, "the newest N letters of the selection (0: all)")
}

// filter turns the flags of cmd into a filter.
func (s *dlqSelection) filter(cmd *cobra.Command, now time.Time) (deadletter.Filter, error) {
	set := cmd.Flags().Changed
	var f deadletter.Filter
	if set("since") {
		since, err := timeFlag("since", s.since, now)
		if err != nil {
			return f, err
		}
		f.Since = since
	}
	f.Key = s.key
	if set("partition") {
		if s.partition < 0 {
			return f, fmt.Errorf("--partition: %d is negative", s.partition)
		}
		f.Partition = &s.partition
	}
	if (set("from-offset") || set("to-offset")) && !set("partition") {
		return f, fmt.Errorf("--from-offset and --to-offset need --partition (offsets are per partition)")
	}
	if set("from-offset") {
		if s.fromOff < 0 {
			return f, fmt.Errorf("--from-offset: %d is negative", s.fromOff)
		}
		f.From = s.fromOff
	}
	if set("to-offset") {
		if s.toOff < f.From {
			return f, fmt.Errorf("--to-offset: %d is before --from-offset %d", s.toOff, f.From)
		}
		f.Until = s.toOff + 1
	}
	if s.limit < 0 {
		return f, fmt.Errorf("--limit: %d is negative", s.limit)
	}
	f.Limit = s.limit
	return f, nil
}

// timeFlag reads a time flag (--since, --until): an RFC 3339 time, or a
// duration back from now.
func timeFlag(flag, v string, now time.Time) (time.Time, error) {
	t, err := events.ParseTime(v, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s: %w", flag, err)
	}
	return t, nil
}

// dlqRef reads PARTITION/OFFSET as list prints it.
func dlqRef(v string) (int32, int64, error) {
	p, o, ok := strings.Cut(v, "/")
	pn, perr := strconv.ParseInt(p, 10, 32)
	on, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
		return 0, 0, fmt.Errorf("%q is not PARTITION/OFFSET (as dlq list prints it, e.g. 3/42)", v)
	}
	return int32(pn), on, nil
}

// withDLQ runs fn with a client on the configured cluster once a broker
// answered.
func withDLQ(cmd *cobra.Command, kindFlag, output string, fn func(ctx context.Context, d dlqTarget) error) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	kind, err := deadletter.ParseKind(kindFlag)
	if err != nil {
		return fmt.Errorf("--dlq: %w", err)
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		if err := c.Client.Ping(pingCtx); err != nil {
			return fmt.Errorf("no broker answered at %s: %w", strings.Join(c.cfg.SeedBrokers(), ","), err)
		}
		return fn(ctx, dlqTarget{Service: deadletter.New(c.Cluster), cluster: c, kind: kind})
	})
}

// dlqTarget is one DLQ on one cluster.
type dlqTarget struct {
	*deadletter.Service
	cluster
	kind deadletter.Kind
}

// dlqOptions are the flags every dlq command shares.
type dlqOptions struct {
	kind, output string
}

func newDLQCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect dead letters and redrive them",
		Long: `Dead letters are records hookstream could not handle. The processor DLQ
(<prefix>.dlq) holds ingest records the processor could not process; the
delivery DLQ (<prefix>.delivery-dlq) holds deliveries that exhausted their
attempts. Fix the cause, then redrive: processor letters are copied back to
<prefix>.ingest, delivery letters to <prefix>.delivery-retry, due at once
with a fresh retry schedule. A letter is redriven at most once: running the
same redrive again skips what was copied.`,
	}
	o := &dlqOptions{}
	cmd.PersistentFlags().StringVar(&o.kind, "dlq", "processor", "which DLQ: processor or delivery")
	cmd.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	config.RegisterFlags(cmd.PersistentFlags(), config.Common)
	cmd.AddCommand(newDLQListCommand(o), newDLQShowCommand(o), newDLQRedriveCommand(o))
	return cmd
}

func newDLQListCommand(o *dlqOptions) *cobra.Command {
	var sel dlqSelection
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, oldest first",
		Example: `  hookstream dlq list
  hookstream dlq list --dlq delivery --since 2h
  hookstream dlq list --key 'github:*' --limit 20 --output json
  hookstream dlq list --partition 3 --from-offset 100 --to-offset 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDLQList(cmd, o, &sel) },
	}
	sel.register(cmd)
	return cmd
}

// runDLQList prints the selected letters.
func runDLQList(cmd *cobra.Command, o *dlqOptions, sel *dlqSelection) error {
	f, err := sel.filter(cmd, time.Now())
	if err != nil {
		return err
	}
	return withDLQ(cmd, o.kind, o.output, func(ctx context.Context, d dlqTarget) error {
		letters, err := d.List(ctx, d.kind, f)
		if err != nil {
			return err
		}
		return printLetters(cmd.OutOrStdout(), o.output, letters)
	})
}

func newDLQShowCommand(o *dlqOptions) *cobra.Command {
	var full bool
	cmd := &cobra.Command{
		Use:   "show PARTITION/OFFSET",
		Short: "Show one dead letter: its headers and body",
		Example: `  hookstream dlq show 3/42
  hookstream dlq show 0/7 --dlq delivery --output json
  hookstream dlq show 3/42 --full > body.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runDLQShow(cmd, o, args[0], full) },
	}
	cmd.Flags().BoolVar(&full, "full", false, fmt.Sprintf("print the whole body (the table shows its first %d bytes)", dlqShowBytes))
	return cmd
}

// runDLQShow prints the letter at ref (PARTITION/OFFSET), its whole body
// when full.
func runDLQShow(cmd *cobra.Command, o *dlqOptions, ref string, full bool) error {
	partition, offset, err := dlqRef(ref)
	if err != nil {
		return err
	}
	return withDLQ(cmd, o.kind, o.output, func(ctx context.Context, d dlqTarget) error {
		l, err := d.Show(ctx, d.kind, partition, offset)
		if err != nil {
			return err
		}
		return printLetter(cmd.OutOrStdout(), o.output, d.kind.Topic(d.Names), l, full)
	})
}

func newDLQRedriveCommand(o *dlqOptions) *cobra.Command {
	var sel dlqSelection
	var execute bool
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Copy dead letters back into the pipeline (dry run unless --execute)",
		Long: `Redrive copies the selected letters back: processor letters to <prefix>.ingest
with their original key, value and headers, delivery letters to
<prefix>.delivery-retry, due now with attempts reset. Each copy carries
hs-redriven-from; letters already redriven are skipped, so a redrive can be
run again safely. It needs a selection (--since, --key, --partition with
optional offsets, or --all). Without --execute it prints what it would copy.`,
		Example: `  hookstream dlq redrive --since 1h
  hookstream dlq redrive --since 1h --execute
  hookstream dlq redrive --dlq delivery --key 'sub_abc:*' --execute
  hookstream dlq redrive --partition 3 --from-offset 100 --to-offset 200 --execute
  hookstream dlq redrive --all --execute`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDLQRedrive(cmd, o, &sel, execute) },
	}
	sel.register(cmd)
	cmd.Flags().BoolVar(&sel.all, "all", false, "select every letter")
	cmd.Flags().BoolVar(&execute, "execute", false, "copy the letters (without it: a dry run)")
	return cmd
}

// runDLQRedrive copies the selected letters back when execute, and
// otherwise prints what it would copy.
func runDLQRedrive(cmd *cobra.Command, o *dlqOptions, sel *dlqSelection, execute bool) error {
	set := cmd.Flags().Changed
	selected := set("since") || set("key") || set("partition")
	switch {
	case sel.all && selected:
		return fmt.Errorf("--all selects every letter: drop it or --since, --key and --partition")
	case !sel.all && !selected:
		return fmt.Errorf("redrive needs a selection: --since, --key, --partition (with --from-offset/--to-offset), or --all")
	}
	f, err := sel.filter(cmd, time.Now())
	if err != nil {
		return err
	}
	return withDLQ(cmd, o.kind, o.output, func(ctx context.Context, d dlqTarget) error {
		target := d.kind.Target(d.Names)
		if execute {
			copied, skipped, err := d.Redrive(ctx, d.kind, f)
			if err != nil {
				return err
			}
			d.record(ctx, change{action: "dlq.redrive", target: string(d.kind), status: http.StatusOK, fields: redriveFields(cmd)})
			return printRedrive(cmd.OutOrStdout(), o.output, redriveResult{Topic: target, Records: copied, Skipped: skipped})
		}
		letters, err := d.List(ctx, d.kind, f)
		if err != nil {
			return err
		}
		res := redriveResult{DryRun: true, Topic: target, Letters: []deadletter.Letter{}}
		for _, l := range letters {
			if l.Redriven {
				res.Skipped++
			} else {
				res.Records++
				res.Letters = append(res.Letters, l)
			}
		}
		return printRedrive(cmd.OutOrStdout(), o.output, res)
	})
}

// redriveFields are the names of the fields of a redrive's selection, as
// POST /api/dlq/redrive names those it has.
func redriveFields(cmd *cobra.Command) []string {
	var fields []string
	for _, f := range [][2]string{{"all", "all"}, {"from-offset", "from_offset"}, {"key", "key"}, {"dlq", "kind"},
		{"limit", "limit"}, {"partition", "partition"}, {"since", "since"}, {"to-offset", "to_offset"}} {
		if cmd.Flags().Changed(f[0]) {
			fields = append(fields, f[1])
		}
	}
	return fields
}

// redriveResult is what redrive prints.
type redriveResult struct {
	DryRun bool         `json:"dry_run"`
	Topic  topics.Topic `json:"topic"`
	// Records were copied, or would be in a dry run.
	Records int `json:"records"`
	// Skipped were redriven before.
	Skipped int `json:"skipped"`
	// Letters would be copied (dry run only).
	Letters []deadletter.Letter `json:"letters,omitempty"`
}

func printRedrive(w io.Writer, output string, res redriveResult) error {
	if output == "json" {
		res.Letters = withoutValues(res.Letters)
		return writeJSON(w, res)
	}
	if !res.DryRun {
		_, err := fmt.Fprintf(w, "redrove %d records to %s (%d already redriven, skipped)\n", res.Records, res.Topic, res.Skipped)
		return err
	}
	if len(res.Letters) > 0 {
		if err := printLetters(w, output, res.Letters); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "dry run: would redrive %d records to %s (%d already redriven, would skip); add --execute to copy them\n",
		res.Records, res.Topic, res.Skipped)
	return err
}

// withoutValues drops the bodies: listings show metadata, show the body.
func withoutValues(letters []deadletter.Letter) []deadletter.Letter {
	out := slices.Clone(letters)
	for i := range out {
		out[i].Value = nil
	}
	return out
}

// dlqErrorWidth bounds the error column of the table.
const dlqErrorWidth = 60

func printLetters(w io.Writer, output string, letters []deadletter.Letter) error {
	if output == "json" {
		if letters == nil {
			letters = []deadletter.Letter{}
		}
		return writeJSON(w, withoutValues(letters))
	}
	if len(letters) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAILED AT\tPARTITION/OFFSET\tKEY\tSTAGE\tERROR\tREDRIVEN")
	for _, l := range letters {
		msg := strings.Join(strings.Fields(l.Error), " ")
		if r := []rune(msg); len(r) > dlqErrorWidth {
			msg = string(r[:dlqErrorWidth-1]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\n", l.FailedAt.Format(time.RFC3339), l.Partition, l.Offset,
			l.Key, l.Stage, msg, yesNo(l.Redriven))
	}
	return tw.Flush()
}

// dlqShowBytes is how much of a body show prints without --full.
const dlqShowBytes = 4096

// printLetter prints one letter; the table shows the first dlqShowBytes of
// its body unless full.
func printLetter(w io.Writer, output string, topic topics.Topic, l deadletter.Letter, full bool) error {
	if output == "json" {
		return writeJSON(w, l)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "queue\t%s (%s)\npartition\t%d\noffset\t%d\nkey\t%s\nstage\t%s\nerror\t%s\nfailed at\t%s\n",
		l.Kind, topic, l.Partition, l.Offset, l.Key, l.Stage, l.Error, l.FailedAt.Format(topics.TimeFormat))
	if l.Kind == deadletter.Delivery {
		fmt.Fprintf(tw, "subscription\t%s\nattempts\t%d\nlast status\t%s\n", l.Subscription, l.Attempts, statusOrDash(l.LastStatus))
	}
	fmt.Fprintf(tw, "redriven\t%s\n\nHEADERS\n", yesNo(l.Redriven))
	keys := make([]string, 0, len(l.Headers))
	for k := range l.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\n", k, l.Headers[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	value, size := l.Value, fmt.Sprintf("%d bytes", len(l.Value))
	if !full && len(value) > dlqShowBytes {
		value = value[:dlqShowBytes]
		for !utf8.Valid(value) && utf8.Valid(l.Value) { // cut on a character boundary
			value = value[:len(value)-1]
		}
		size = fmt.Sprintf("first %d of %d bytes; --full prints it all", len(value), len(l.Value))
	}
	body := string(value)
	if !utf8.Valid(l.Value) {
		body, size = base64.StdEncoding.EncodeToString(value), size+", binary, base64"
	}
	_, err := fmt.Fprintf(w, "\nBODY (%s)\n%s\n", size, body)
	return err
}

// statusOrDash is an HTTP status, or "-" for none (an attempt that got no
// answer).
func statusOrDash(status int) string {
	if status == 0 {
		return "-"
	}
	return strconv.Itoa(status)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
