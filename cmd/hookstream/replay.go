package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

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
	var (
		t   groups.Target
		err error
	)
	switch given[0] {
	case "--to-earliest":
		t.Earliest = f.toEarliest
	case "--to-latest":
		t.Latest = f.toLatest
	case "--to-time":
		t, err = groups.ParseTarget(groups.TargetTime, f.toTime)
		if err != nil {
			return groups.Target{}, fmt.Errorf("--to-time %w", err)
		}
	case "--by-duration":
		t, err = groups.ParseTarget(groups.TargetDuration, f.byDuration)
		if err != nil {
			return groups.Target{}, fmt.Errorf("--by-duration %w", err)
		}
	case "--to-offsets":
		t, err = groups.ParseTarget(groups.TargetOffsets, f.toOffsets)
		if err != nil {
			return groups.Target{}, fmt.Errorf("--to-offsets: %w", err)
		}
		if f.partitions != nil {
			return groups.Target{}, errors.New("--partition: not with --to-offsets, whose entries name their partitions")
		}
	}
	if !t.Earliest && !t.Latest && t.Time.IsZero() && t.Duration == 0 && t.Offsets == nil {
		return groups.Target{}, fmt.Errorf("%s=false: give the target flag without a value", given[0])
	}
	return t, nil
}

// fieldNames are the names of the fields a POST /api/replay/execute of
// the same replay sets (groups.ReplayRequest).
func (f *replayFlags) fieldNames() []string {
	fields := []string{"group", "target"}
	if len(f.partitions) > 0 {
		fields = append(fields, "partitions")
	}
	if f.topic != "" {
		fields = append(fields, "topic")
	}
	if f.toTime+f.byDuration+f.toOffsets != "" {
		fields = append(fields, "value")
	}
	slices.Sort(fields)
	return fields
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
are records, read to count them (commit markers and aborted records left
out); past 1 MiB of records a partition (8 MiB in all) a count is in
offsets, shown "≤ N offsets": an upper bound, as on topics written in
transactions, such as <prefix>.events, each transaction's commit marker
takes an offset.

Exactly one target: --to-earliest, --to-latest, --to-time, --by-duration or
--to-offsets. Groups: processor, retry, sub:<id> or a full group name. The
topic defaults to the group's own: <prefix>.ingest for the processor,
<prefix>.events for subscriptions, <prefix>.delivery-retry for retry.

Replaying the processor re-emits the events with their original ids (records
that were duplicates stay dropped); replaying a subscription redelivers to
that subscriber; replaying retry reads the pending retries again.

--execute refuses while the group has active members, and names them: a
running consumer would overwrite the new offsets with its own. Stop the
roles that consume with the group, execute, then start them again. A
subscription's group has no members: while dispatchers run, --execute
hands the replay to them and returns once they applied it, and they
deliver from the targets at once; a pull subscription's consumer is served
from them at its next request. Each case prints what followed.`,
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
		group, err := groups.Resolve(c.Names, f.group)
		if err != nil {
			return fmt.Errorf("--group: %w", err)
		}
		t, err := f.target(cmd.Flags().Changed)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		r, err := c.registry()
		if err != nil {
			return err
		}
		replay, err := groups.New(c.Cluster, r).Replay(ctx, string(group), f.topic, f.partitions, t, f.execute)
		if err != nil {
			return err
		}
		if replay.Executed {
			c.record(ctx, change{action: "replay.execute", target: f.group, status: http.StatusOK, fields: f.fieldNames()})
		}
		return printReplay(cmd.OutOrStdout(), f.output, replay)
	})
}

// printReplay prints a replay plan and whether it was committed.
func printReplay(w io.Writer, output string, r groups.Replay) error {
	if output == "json" {
		return writeJSON(w, r)
	}
	if err := r.WriteText(w); err != nil {
		return err
	}
	if r.Executed {
		_, err := fmt.Fprintln(w, r.Outcome)
		return err
	}
	_, err := fmt.Fprintln(w, "Dry run: nothing committed. Add --execute to commit this plan.")
	return err
}
