package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/audit"
	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/topics"
)

// auditOptions are the flags of hookstream audit.
type auditOptions struct {
	output, since, actor, action, target string
	follow                               bool
}

func newAuditCommand() *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit [--since T] [--actor A] [--action GLOB] [--target T] [--follow]",
		Short: "Show the audit trail: every change made through the admin API and every refused request",
		Long: `Shows the audit trail (<prefix>.audit), oldest first: when, who (the token's
name and role; HOOKSTREAM_ADMIN_TOKEN is the bootstrap admin), the action
(subscription.create|update|delete|rotate|enable|disable, token.create|revoke,
replay.execute, dlq.redrive, event.resend, auth.refused), its target, the
outcome (HTTP status), the names of the fields a change set (never their
values), the request id and the remote address. Refused requests are recorded
at most 10 a second per instance.

Changes a command made by writing the topics itself (subscriptions add,
update, rm, enable, disable, rotate-secret; replay --execute; dlq redrive
--execute) are recorded with the actor cli:<user>@<host>, as the machine that
ran it names them: trust it only as far as the Kafka ACLs of the topics, since
whoever may write them may write any actor.

It asks the admin API of a running hookstream (--admin-addr) with the token
in --admin-token or HOOKSTREAM_ADMIN_TOKEN: an admin's or an operator's.
--follow keeps printing records as they are written.`,
		Example: `  hookstream audit --since 24h
  hookstream audit --action 'subscription.*' --actor oncall
  hookstream audit --action auth.refused --follow
  hookstream audit --target sub_4f1c2a --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAudit(cmd, o) },
	}
	cmd.Flags().StringVar(&o.since, "since", "", "only records since: an RFC 3339 time or a duration back from now (24h)")
	cmd.Flags().StringVar(&o.actor, "actor", "", "only records of this token (id or name)")
	cmd.Flags().StringVar(&o.action, "action", "", "only actions matching this glob (subscription.*)")
	cmd.Flags().StringVar(&o.target, "target", "", "only records of this target (a subscription or token id, a group)")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new records until interrupted")
	addOutputFlag(cmd, &o.output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// auditPoll is how often --follow asks for new records.
const auditPoll = time.Second

func runAudit(cmd *cobra.Command, o auditOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	q := url.Values{"actor": {o.actor}, "action": {o.action}, "target": {o.target}, "limit": {strconv.Itoa(audit.MaxLimit)}}
	if o.since != "" {
		t, err := timeFlag("since", o.since, time.Now())
		if err != nil {
			return err
		}
		q.Set("since", t.Format(time.RFC3339Nano))
	}
	cfg, err := config.Load(cmd.Flags(), os.LookupEnv)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	for first := true; ; first = false {
		ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
		raw, err := adminGet(ctx, cfg, "/api/audit?"+q.Encode())
		cancel()
		if cmd.Context().Err() != nil {
			return nil // interrupted
		}
		if err != nil {
			return err
		}
		var page audit.Page
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("admin API answered something other than the audit trail: %w", err)
		}
		if err := printAudit(w, o.output, page.Records, first); err != nil {
			return err
		}
		if first && len(page.Records) == 0 && o.output == "table" && !o.follow {
			fmt.Fprintln(w, "(no records)")
		}
		q.Set("cursor", page.Cursor)
		if len(page.Records) > 0 {
			continue // read on to the end
		}
		if !o.follow {
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(auditPoll):
		}
	}
}

// printAudit prints records: JSON, one object a line, or table rows,
// after the header when header is set.
func printAudit(w io.Writer, output string, records []admin.Record, header bool) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		for _, r := range records {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "TIME\tACTOR\tROLE\tACTION\tTARGET\tSTATUS\tFIELDS\tREQUEST\tREMOTE")
	}
	for _, r := range records {
		actor := cmp.Or(r.Actor.Name, "-")
		if r.Actor.Team != "" {
			actor += " (" + r.Actor.Team + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.At.UTC().Format(topics.TimeFormat), actor, cmp.Or(string(r.Actor.Role), "-"),
			r.Action, cmp.Or(r.Target, "-"), r.Status, cmp.Or(strings.Join(r.Fields, ","), "-"), r.RequestID, r.RemoteAddr)
	}
	return tw.Flush()
}

// change is what the audit trail records of a change a command made by
// writing the topics itself: the action, target, status and field names
// the admin API records for the same change.
type change struct {
	action, target string
	status         int
	fields         []string
}

// record writes ch to the audit trail as the change of cliActor. A
// record that cannot be written is logged: the change is made.
func (c cluster) record(ctx context.Context, ch change) {
	audit.New(c.Cluster, c.log, prometheus.NewRegistry()).Record(ctx, admin.Record{
		At: time.Now().UTC(), Actor: cliActor(), Action: ch.action, Target: ch.target, Status: ch.status, Fields: ch.fields,
	})
}

// cliActor is who a change a command wrote itself is recorded as:
// cli:<user>@<host> as this machine names them, worth what the Kafka ACLs
// of the topics are worth.
func cliActor() admin.Identity {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return admin.Identity{TokenID: "cli", Name: "cli:" + who + "@" + host}
}

// fieldNames are the names of the fields body sets, as the admin API
// reads a JSON body: its keys that are not null, sorted.
func fieldNames(body any) []string {
	raw, err := json.Marshal(body)
	var fields map[string]json.RawMessage
	if err != nil || json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	var names []string
	for name, v := range fields {
		if string(v) != "null" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
