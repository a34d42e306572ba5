package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/config"
)

func newTokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Make, list and revoke the access tokens of the admin API",
		Long: `Access tokens let each team and operator reach the admin API with a role
of its own: admin (everything, tokens included), operator (every read, payloads
included, and the pipeline's controls), viewer (reads without secrets, header
values or bodies), team (its own team's subscriptions). HOOKSTREAM_ADMIN_TOKEN
stays an admin: with it you make the others.

The commands ask the admin API of a running hookstream (--admin-addr), with
the token in --admin-token or HOOKSTREAM_ADMIN_TOKEN, which must be an admin's.
Tokens are kept as SHA-256 digests in <prefix>.access: a token is shown once,
when it is made, and a new or revoked token holds on every instance within
seconds.`,
	}
	cmd.AddCommand(newTokensAddCommand(), newTokensListCommand(), newTokensRevokeCommand())
	return cmd
}

func newTokensAddCommand() *cobra.Command {
	var (
		output  string
		req     access.CreateRequest
		role    string
		expires time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add --name NAME --role ROLE [--team T] [--expires D]",
		Short: "Make a token and print it, the only time it is shown",
		Example: `  hookstream tokens add --name oncall --role operator
  hookstream tokens add --name payments-ci --role team --team payments --expires 720h --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Role = admin.Role(role)
			if expires != 0 {
				req.Expires = expires.String()
			}
			return runTokensAdd(cmd, output, req)
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the token's name: 1 to 63 of a-z, 0-9 and '-' (required)")
	cmd.Flags().StringVar(&role, "role", "", "admin, operator, viewer or team (required)")
	cmd.Flags().StringVar(&req.Team, "team", "", "the team of a team token")
	cmd.Flags().DurationVar(&expires, "expires", 0, "how long the token works, e.g. 720h (default: until revoked)")
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

func runTokensAdd(cmd *cobra.Command, output string, req access.CreateRequest) error {
	var c access.Created
	if err := tokensCall(cmd, output, http.MethodPost, "/api/tokens", req, &c); err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(cmd.OutOrStdout(), c)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "token %s (%s, role %s%s), expires %s:\n\n  %s\n\nKeep it now: it is not shown again.\n",
		c.ID, c.Name, c.Role, teamOf(c.Token), expiry(c.ExpiresAt), c.Secret)
	return nil
}

func newTokensListCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tokens: id, name, role, team, created, expires, last used (never the token)",
		Long: `Lists the tokens. LAST USED is when the instance that answers last accepted
the token: each instance keeps it in memory, so it is empty after a restart and
for a token used only on other instances.`,
		Example: `  hookstream tokens list
  hookstream tokens list --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []access.Token
			if err := tokensCall(cmd, output, http.MethodGet, "/api/tokens", nil, &list); err != nil {
				return err
			}
			return printTokens(cmd.OutOrStdout(), output, list)
		},
	}
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

func newTokensRevokeCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token: every instance refuses it within seconds",
		Example: `  hookstream tokens revoke tok_5f2a9c01d3e4b6a7`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := tokensCall(cmd, output, http.MethodDelete, "/api/tokens/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked\n", args[0])
			return err
		},
	}
	addOutputFlag(cmd, &output)
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// tokensCall checks output, sends method path with body to the admin API
// and decodes its answer into out (nil: none).
func tokensCall(cmd *cobra.Command, output, method, path string, body, out any) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	cfg, err := config.Load(cmd.Flags(), os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), connectTimeout)
	defer cancel()
	raw, err := adminCall(ctx, cfg, method, path, body)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin API answered something other than tokens: %w", err)
	}
	return nil
}

func printTokens(w io.Writer, output string, list []access.Token) error {
	if output == "json" {
		return writeJSON(w, list)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tTEAM\tCREATED\tEXPIRES\tLAST USED")
	for _, t := range list {
		used := "-"
		if t.LastUsedAt != nil {
			used = t.LastUsedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, cmp.Or(t.Team, "-"),
			t.CreatedAt.UTC().Format(time.RFC3339), expiry(t.ExpiresAt), used)
	}
	if len(list) == 0 {
		fmt.Fprintln(tw, "(no tokens)")
	}
	return tw.Flush()
}

func teamOf(t access.Token) string {
	if t.Team == "" {
		return ""
	}
	return ", team " + t.Team
}

// expiry is when a token expires: never, or the time.
func expiry(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.UTC().Format(time.RFC3339)
}
