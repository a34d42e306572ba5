package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/groups"
)

// replayFlags are the flags of replay.
type replayFlags struct {
	group, topic, output string
	toEarliest, toLatest bool
	toTime, byDuration   string
	toOffsets            string
	partitions           []int32
	execute              bool
}

// target parses the one target flag that was given; changed reports
// whether a flag was given.
func (f *replayFlags) target(changed func(name string) bool) (groups.Target, error) {
	var given []string
	for _, name := range []string{"to-earliest", "to-latest", "to-time", "by-duration", "to-offsets"} {
		if changed(name) {
			given = append(given, "--"+name)
		}
	}
	switch len(given) {
	case 0:
		return groups.Target{}, errors.New("choose a target: --to-earliest, --to-latest, --to-time, --by-duration or --to-offsets")
	case 1:
	default:
		return groups.Target{}, fmt.Errorf("%s given: choose one target", joinAnd(given))
	}
	var t groups.Target
	switch given[0] {
	case "--to-earliest":
		t.Earliest = f.toEarliest
	case "--to-latest":
		t.Latest = f.toLatest
	case "--to-time":
		at, err := time.Parse(time.RFC3339, f.toTime)
		if err != nil {
			return groups.Target{}, fmt.Errorf("--to-time %q: not an RFC 3339 time such as 2026-11-21T10:00:00Z", f.toTime)
		}
		t.Time = at
	case "--by-duration":
		d, err := time.ParseDuration(f.byDuration)
		if err != nil || d <= 0 {
			return groups.Target{}, fmt.Errorf("--by-duration %q: not a positive duration such as 90m or 2h", f.byDuration)
		}
		t.Duration = d
	case "--to-offsets":
		offsets, err := groups.ParseOffsets(f.toOffsets)
		if err != nil {
			return groups.Target{}, fmt.Errorf("--to-offsets: %w", err)
		}
		if f.partitions != nil {
			return groups.Target{}, errors.New("--partition: not with --to-offsets, whose entries name their partitions")
		}
		t.Offsets = offsets
	}
	if !t.Earliest && !t.Latest && t.Time.IsZero() && t.Duration == 0 && t.Offsets == nil {
		return groups.Target{}, fmt.Errorf("%s=false: give the target flag without a value", given[0])
	}
	return t, nil
}

// describe says where the target moves the group, for the plan's header.
func (f *replayFlags) describe(t groups.Target) string {
	switch {
	case t.Earliest:
		return "the log start"
	case t.Latest:
		return "the end"
	case !t.Time.IsZero():
		return "the first records at or after " + t.Time.UTC().Format(time.RFC3339)
	case t.Duration != 0:
		return "the first records of the last " + f.byDuration
	default:
		return "offsets " + f.toOffsets
	}
}

// joinAnd joins "a", "b" and "c" as "a, b and c".
func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func newReplayCommand() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Move a consumer group's offsets to re-read (or skip) records: dry run unless --execute",
		Long: `Plans moving a group's committed offsets to a target and prints the plan:
per partition the current offset ("-" when none is committed), the target,
the records the group will read again, and whether a target outside the log
was clamped to its start or end. Nothing changes without --execute. Counts
are offsets: on topics written in transactions, such as <prefix>.events, each
transaction's commit marker counts as one.

Exactly one target: --to-earliest, --to-latest, --to-time, --by-duration or
--to-offsets. Groups: processor, retry, sub:<id> or a full group name. The
topic defaults to the group's own: <prefix>.ingest for the processor,
<prefix>.events for subscriptions, <prefix>.delivery-retry for retry.

Replaying the processor re-emits the events with their original ids (records
that were duplicates stay dropped); replaying a subscription redelivers to
that subscriber; replaying retry reads the pending retries again.

--execute refuses while the group has active members, and names them: a
running consumer would overwrite the new offsets with its own. Stop the
roles that consume with the group, execute, then start them again.`,
		Example: `  hookstream replay --group processor --to-earliest
  hookstream replay --group sub:sub_abc --to-time 2026-11-21T10:00:00Z --execute
  hookstream replay --group sub:sub_abc --by-duration 2h --partition 0,3
  hookstream replay --group retry --to-latest --execute
  hookstream replay --group processor --to-offsets 0:15,3:200 --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReplay(cmd, &f) },
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.group, "group", "g", "", "the group: processor, retry, sub:<id> or a full group name")
	fs.BoolVar(&f.toEarliest, "to-earliest", false, "move to the log start: re-read everything retained")
	fs.BoolVar(&f.toLatest, "to-latest", false, "move to the end: skip everything not yet read")
	fs.StringVar(&f.toTime, "to-time", "", "move to the first records at or after this RFC 3339 time")
	fs.StringVar(&f.byDuration, "by-duration", "", "move to the first records of this last duration (e.g. 90m: now minus 90 minutes)")
	fs.StringVar(&f.toOffsets, "to-offsets", "", "move to these offsets, partition:offset pairs (e.g. 0:15,3:200); only these partitions move")
	fs.StringVar(&f.topic, "topic", "", "the topic (default: the group's own)")
	// Not --partitions: that is the topics' partition count, a flag of run.
	fs.Int32SliceVar(&f.partitions, "partition", nil, "move only these partitions, comma separated or repeated (e.g. 0,1; default: all)")
	fs.BoolVar(&f.execute, "execute", false, "commit the plan (default: dry run)")
	addOutputFlag(cmd, &f.output)
	config.RegisterFlags(cmd.Flags(), config.Common)
	return cmd
}

// runReplay plans moving the group's offsets to the target of the flags,
// commits the plan when f.execute, and prints it.
func runReplay(cmd *cobra.Command, f *replayFlags) error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		if f.group == "" {
			return errors.New("--group is required: processor, retry, sub:<id> or a full group name")
		}
		group, err := groups.Resolve(c.names, f.group)
		if err != nil {
			return fmt.Errorf("--group: %w", err)
		}
		t, err := f.target(cmd.Flags().Changed)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		plan, err := groups.PlanReplay(ctx, c.cl, c.names, string(group), f.topic, f.partitions, t)
		if err != nil {
			return err
		}
		if f.execute {
			if err := groups.Execute(ctx, c.adm, plan); err != nil {
				return err
			}
		}
		return printPlan(cmd.OutOrStdout(), f.output, plan, f.describe(t), f.execute)
	})
}

// printPlan prints a replay plan and whether it was committed.
func printPlan(w io.Writer, output string, plan groups.Plan, target string, executed bool) error {
	if output == "json" {
		return writeJSON(w, struct {
			groups.Plan
			Executed bool `json:"executed"`
		}{plan, executed})
	}
	fmt.Fprintf(w, "Replay of group %s on %s to %s:\n", plan.Group, plan.Topic, target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCURRENT\tTARGET\tREREAD\tNOTE")
	var skipped int64
	for _, m := range plan.Moves {
		current := "-"
		if m.Current >= 0 {
			current = fmt.Sprint(m.Current)
		}
		var notes []string
		if m.Clamped != "" {
			notes = append(notes, "clamped "+m.Clamped)
		}
		if m.Skip > 0 {
			notes = append(notes, fmt.Sprintf("skips %d", m.Skip))
		}
		skipped += m.Skip
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\n", m.Partition, current, m.Target, m.Reread, strings.Join(notes, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Records to re-read: %d", plan.Reread())
	if skipped > 0 {
		fmt.Fprintf(w, ", to skip: %d", skipped)
	}
	fmt.Fprintln(w, ".")
	fmt.Fprintf(w, "What this means: %s.\n", plan.Effect)
	if executed {
		fmt.Fprintf(w, "Committed: %s resumes from these targets when its consumers start.\n", plan.Group)
		return nil
	}
	if len(plan.Members) > 0 {
		fmt.Fprintf(w, "Active members: %s. --execute is refused until they stop.\n", strings.Join(plan.Members, ", "))
	}
	fmt.Fprintln(w, "Dry run: nothing committed. Add --execute to commit this plan.")
	return nil
}
