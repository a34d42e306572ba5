package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/instances"
)

func newInstancesCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List the deployment's hookstream processes and how ready each is",
		Long: `Lists the hookstream processes of the deployment as Kafka's groups know them:
the members of the processor group (processors) and of the retry group
(dispatchers), each process with the admin address it advertises
(HOOKSTREAM_ADMIN_ADVERTISED_ADDR, else HOOKSTREAM_ADMIN_ADDR), the host the
broker sees, its roles, its group members, and its readiness, asked of its
/readyz (` + fmt.Sprint(instances.ProbeTimeout) + ` at most, no redirect followed).

Readiness is unknown for a process that advertises no admin address or whose
listener does not answer from here (a loopback address is reached only from
its own host). A process that runs only the ingest role joins no group and is
not listed. At most ` + fmt.Sprint(instances.MaxInstances) + ` processes are listed; the others are counted.`,
		Example: `  hookstream instances
  hookstream instances --output json | jq '.instances[] | select(.readiness != "ready")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInstances(cmd, output) },
	}
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Common)
	return cmd
}

// runInstances prints the deployment's instances.
func runInstances(cmd *cobra.Command, output string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		list, err := instances.New(c.Cluster).Discover(ctx, nil)
		if err != nil {
			return err
		}
		return printInstances(cmd.OutOrStdout(), output, list)
	})
}

func printInstances(w io.Writer, output string, list instances.List) error {
	if output == "json" {
		return writeJSON(w, list)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADMIN ADDRESS\tHOST\tROLES\tREADINESS\tMEMBERS\tDETAIL")
	for _, in := range list.Instances {
		var members []string
		for _, m := range in.Members {
			members = append(members, fmt.Sprintf("%s (%d partitions)", m.ID, m.Partitions))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cmp.Or(in.AdminAddr, "-"), cmp.Or(in.Host, "-"), strings.Join(in.Roles, ","),
			in.Readiness, cmp.Or(strings.Join(members, ", "), "-"), in.Detail)
	}
	if len(list.Instances) == 0 {
		fmt.Fprintln(tw, "(no processor or dispatcher is running)")
	}
	if list.Omitted > 0 {
		fmt.Fprintf(tw, "(and %d more, not listed)\n", list.Omitted)
	}
	return tw.Flush()
}
