package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/topics"
)

func newTopicsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create and describe hookstream's Kafka topics",
	}
	config.RegisterFlags(cmd.PersistentFlags(), config.Common)
	cmd.AddCommand(newTopicsCreateCommand(), newTopicsDescribeCommand())
	return cmd
}

func newTopicsCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the topics that are missing (idempotent) and check the ones that exist",
		Example: `  hookstream topics create
  HOOKSTREAM_BROKERS=kafka:9092 HOOKSTREAM_PARTITIONS=24 hookstream topics create`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTopicsCreate(cmd) },
	}
	config.RegisterFlags(cmd.Flags(), config.Topology)
	return cmd
}

// runTopicsCreate creates the missing topics and checks the others.
func runTopicsCreate(cmd *cobra.Command) error {
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		if err := ensureTopics(ctx, c.cfg, c.Client, c.log); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), "topics are in place")
		return nil
	})
}

func newTopicsDescribeCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show hookstream's topics: partitions, configs and records",
		Example: `  hookstream topics describe
  hookstream topics describe --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTopicsDescribe(cmd, output) },
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// runTopicsDescribe prints hookstream's topics.
func runTopicsDescribe(cmd *cobra.Command, output string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		infos, err := describeTopics(ctx, c.Admin(), topics.Specs(c.Names, c.cfg.Partitions, c.cfg.MaxBody))
		if err != nil {
			return err
		}
		return printTopics(cmd.OutOrStdout(), output, infos)
	})
}

// topicInfo is one topic as describe shows it.
type topicInfo struct {
	Topic      string            `json:"topic"`
	Exists     bool              `json:"exists"`
	Partitions int               `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	// Offsets is the sum over partitions of end minus start offset: the
	// records, plus one commit marker per transaction on transactional topics.
	Offsets int64           `json:"offsets"`
	Spans   []partitionSpan `json:"partition_offsets,omitempty"`
}

type partitionSpan struct {
	Partition int32 `json:"partition"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
}

// describeTopics describes the topics of specs, every topic hookstream
// creates, as they are on the cluster.
func describeTopics(ctx context.Context, adm *kadm.Client, specs []topics.Spec) ([]topicInfo, error) {
	list := make([]string, len(specs))
	for i, s := range specs {
		list[i] = string(s.Topic)
	}
	details, err := adm.ListTopics(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("describe configs: %w", err)
	}
	out := make([]topicInfo, 0, len(list))
	for _, name := range list {
		info := topicInfo{Topic: name}
		d, ok := details[name]
		if !ok || d.Err != nil {
			out = append(out, info)
			continue
		}
		info.Exists = true
		info.Partitions = len(d.Partitions)
		if rc, err := configs.On(name, nil); err == nil {
			info.Configs = make(map[string]string)
			for _, c := range rc.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil {
					info.Configs[c.Key] = *c.Value
				}
			}
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != name || o.Err != nil {
				return
			}
			start, _ := starts.Lookup(name, o.Partition)
			info.Offsets += o.Offset - start.Offset
			info.Spans = append(info.Spans, partitionSpan{Partition: o.Partition, Start: start.Offset, End: o.Offset})
		})
		sort.Slice(info.Spans, func(i, j int) bool { return info.Spans[i].Partition < info.Spans[j].Partition })
		out = append(out, info)
	}
	return out, nil
}

func printTopics(w io.Writer, output string, infos []topicInfo) error {
	if output == "json" {
		return writeJSON(w, infos)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tOFFSETS\tCONFIGS")
	for _, t := range infos {
		if !t.Exists {
			fmt.Fprintf(tw, "%s\t-\t-\tmissing (run hookstream topics create)\n", t.Topic)
			continue
		}
		keys := make([]string, 0, len(t.Configs))
		for k := range t.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + t.Configs[k]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", t.Topic, t.Partitions, t.Offsets, strings.Join(parts, " "))
	}
	return tw.Flush()
}

// addOutputFlag adds --output table|json.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table or json")
}

func checkOutput(output string) error {
	if output != "table" && output != "json" {
		return fmt.Errorf("--output: invalid value %q (want table or json)", output)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
