package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/groups"
)

func newLagCommand() *cobra.Command {
	var group, output string
	cmd := &cobra.Command{
		Use:   "lag",
		Short: "Show how far consumer groups are behind: committed offset, end offset and the events left per partition",
		Long: `Shows hookstream's consumer groups partition by partition: the committed offset
("-" when the group has committed none), the end offset a read_committed
consumer reads to, the events left to read between them and the member
assigned the partition, with a total per group, the group's state and its
number of members.

Without --group it shows every group of the deployment: the processor, the
retry consumer and each subscription. Lag reads the records left to count
them, skipping the commit marker that ends each transaction: a group that
has read everything lags 0. Past 1 MiB of records a partition (8 MiB in
all) it counts offsets instead, shown "≤ N offsets": an upper bound, as
each transaction's marker takes an offset.`,
		Example: `  hookstream lag
  hookstream lag --group processor
  hookstream lag --group sub:sub_abc --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLag(cmd, group, output) },
	}
	cmd.Flags().StringVarP(&group, "group", "g", "", "one group: processor, retry, sub:<id> or a full group name (default: every hookstream group)")
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Common)
	return cmd
}

// runLag prints the lag of group (a name groups.Resolve reads), or of
// every group of the deployment when it is empty.
func runLag(cmd *cobra.Command, group, output string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		if group != "" {
			if _, err := groups.Resolve(c.Names, group); err != nil {
				return fmt.Errorf("--group: %w", err)
			}
		}
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		r, err := c.registry()
		if err != nil {
			return err
		}
		lags, err := groups.New(c.Cluster, r).Lags(ctx, group)
		if errors.Is(err, groups.ErrNoGroup) {
			return fmt.Errorf("--group: %w", err)
		}
		if err != nil {
			return err
		}
		return printLag(cmd.OutOrStdout(), output, lags)
	})
}

// lagFootnote explains the table's numbers under it.
const lagFootnote = `
COMMITTED is the next offset the group reads ("-": none committed yet).
END is the end of the log as a read_committed consumer reads it. On
transactional topics every transaction ends with a commit marker, an offset
that holds no record, so a group that has read everything commits the
offset of that marker: COMMITTED 1 and END 2 with LAG 0 is caught up.
LAG is the events left to read, counted by reading them; "≤ N offsets" is
where there were too many to read (over 1 MiB a partition): the offsets
from the first record left to END, an upper bound of the events. MEMBER is
the group member assigned the partition ("-": none).
`

func printLag(w io.Writer, output string, lags []groups.GroupLag) error {
	if output == "json" {
		return writeJSON(w, lags)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS\tTOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER")
	for _, g := range lags {
		for _, p := range g.Partitions {
			committed := "-"
			if p.Committed >= 0 {
				committed = fmt.Sprint(p.Committed)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\n", g.Group, g.State, g.Members, p.Topic, p.Partition, committed, p.End, p.LagText(), cmp.Or(p.Member, "-"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\ttotal\t\t\t\t%s\n", g.Group, g.State, g.Members, g.TotalText())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprint(w, lagFootnote)
	return err
}
