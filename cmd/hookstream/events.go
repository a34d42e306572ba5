package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/topics"
)

func newEventsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow an event: its whole story from the ledger",
	}
	cmd.AddCommand(newEventsGetCommand())
	return cmd
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
processor that owns the event's partition. An event is remembered for
HOOKSTREAM_DEDUP_TTL.`,
		Example: `  hookstream events get github:72d3162e
  hookstream events get stripe:evt_1Nq --admin-addr 10.0.0.5:8081 --admin-token "$HOOKSTREAM_ADMIN_TOKEN" --output json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if !strings.Contains(args[0], ":") {
				return fmt.Errorf("event %q: want <source>:<event-id>, as ingest answered it (\"id\")", args[0])
			}
			cfg, err := config.Load(cmd.Flags(), config.Env)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
			defer cancel()
			raw, err := adminGet(ctx, cfg, "/api/events/"+url.PathEscape(args[0]))
			if err != nil {
				return err
			}
			if output == "json" {
				_, err := cmd.OutOrStdout().Write(raw)
				return err
			}
			var s processor.Story
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("admin API answered something other than a story: %w", err)
			}
			return printStory(cmd.OutOrStdout(), s)
		},
	}
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// adminGet asks the admin API of a running hookstream for path.
func adminGet(ctx context.Context, cfg *config.Config, path string) ([]byte, error) {
	addr := cfg.AdminAddr
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	if cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no admin API at %s: is `hookstream run` running? set --admin-addr (%v)", addr, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Message, Error string }
		_ = json.Unmarshal(raw, &e)
		return nil, fmt.Errorf("admin API at %s: %s", addr, cmp.Or(e.Error, e.Message, resp.Status))
	}
	return raw, nil
}

// printStory prints a story as a time-ordered table, then where each
// delivery stands.
func printStory(w io.Writer, s processor.Story) error {
	type line struct {
		at   time.Time
		what string
	}
	var lines []line
	add := func(at *time.Time, format string, args ...any) {
		if at != nil {
			lines = append(lines, line{*at, fmt.Sprintf(format, args...)})
		}
	}
	add(s.ReceivedAt, "received by ingest (ingest partition %d, offset %d)", s.Partition, s.Offset)
	if s.Failure != nil {
		add(&s.ProcessedAt, "processing failed at stage %s: %s (dead-lettered to the DLQ)", s.Failure.Stage, s.Failure.Error)
	} else {
		add(&s.ProcessedAt, "processed: emitted to the events topic (partition %d)", s.Partition)
	}
	add(s.Duplicates.LastAt, "duplicate dropped (%d in all, this the last)", s.Duplicates.Count)
	add(s.Replays.LastAt, "replayed: emitted again after an offset reset (%d in all, this the last)", s.Replays.Count)
	for _, d := range s.Deliveries {
		for _, a := range d.Recent {
			what := fmt.Sprintf("%s: attempt %d %s", d.Subscription, a.N, a.Outcome)
			if a.Status != 0 {
				what += fmt.Sprintf(", status %d", a.Status)
			}
			what += fmt.Sprintf(", %.1f ms", a.LatencyMS)
			if a.Error != "" {
				what += ": " + a.Error
			}
			lines = append(lines, line{a.At, what})
		}
		add(d.DeadLetteredAt, "%s: dead-lettered after %d attempts", d.Subscription, d.Attempts)
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "EVENT %s  status %s, remembered until %s\n\n", s.ID, s.Status, s.ExpiresAt.Format(time.RFC3339))
	fmt.Fprintln(tw, "TIME\tWHAT")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\n", l.at.UTC().Format(topics.TimeFormat), l.what)
	}
	fmt.Fprintln(tw, "\nSUBSCRIPTION\tNOW\tATTEMPTS\tLAST STATUS")
	for _, d := range s.Deliveries {
		now := d.State
		if d.DueAt != nil && d.State == "retrying" {
			now += " at " + d.DueAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", d.Subscription, now, d.Attempts, d.Status)
	}
	if len(s.Deliveries) == 0 {
		fmt.Fprintln(tw, "(no delivery attempt yet)")
	}
	return tw.Flush()
}
