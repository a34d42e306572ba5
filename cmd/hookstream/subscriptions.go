package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/webhook"
)

// subscriptionFlags are the writable fields of a subscription.
type subscriptionFlags struct {
	url, secret, description string
	team                     string
	topic                    string
	sources, eventTypes      []string
	ordered                  bool
	maxInFlight              int
	rateLimit                float64
	batchMax                 int
	batchWait                time.Duration
	filter, transform        string
	headers                  []string // "Name: value"
	schedule                 string
	timeout                  time.Duration
}

func (f *subscriptionFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.url, "url", "", "subscriber URL (http or https)")
	fs.StringVar(&f.topic, "topic", "", "instead of a URL: Kafka topic the events are written to, exactly once (created when missing; read it read_committed)")
	fs.StringVar(&f.secret, "secret", "", "signing secret, whsec_ + base64 (generated when not given)")
	fs.StringVar(&f.description, "description", "", "what the subscription is for")
	fs.StringVar(&f.team, "team", "", "the team whose team tokens manage it (\"\": admins and operators only)")
	fs.StringArrayVar(&f.sources, "source", nil, "deliver only events of these sources (glob, repeatable)")
	fs.StringArrayVar(&f.eventTypes, "event-type", nil, "deliver only events of these types (glob, repeatable)")
	fs.BoolVar(&f.ordered, "ordered", false, "deliver one event at a time per partition, retrying in place")
	fs.IntVar(&f.maxInFlight, "max-in-flight", subscriptions.DefaultMaxInFlight, "concurrent deliveries (unordered)")
	fs.Float64Var(&f.rateLimit, "rate-limit", 0, "deliveries per second (0: unlimited)")
	fs.IntVar(&f.batchMax, "batch-max", 1, "events per delivery, 1 to 1000; above 1 the body is {\"events\":[envelope,...]}")
	fs.DurationVar(&f.batchWait, "batch-wait", 0, "how long a partial batch waits for more events, at most 10s (0: sends what was read)")
	fs.StringVar(&f.filter, "filter", "", "CEL expression an event must make true to be delivered (\"\": every event)")
	fs.StringVar(&f.transform, "transform", "", "CEL expression whose value, as JSON, is delivered instead of the envelope (\"\": the envelope)")
	fs.StringArrayVar(&f.headers, "header", nil, "'Name: value' added to every delivery, value stored encrypted like the secret (repeatable)")
	fs.StringVar(&f.schedule, "schedule", "", "delays before retries 1..n, e.g. 10s,1m,10m (\"\": HOOKSTREAM_DELIVERY_SCHEDULE)")
	fs.DurationVar(&f.timeout, "timeout", 0, "timeout of one delivery attempt, at most 60s (0: HOOKSTREAM_DELIVERY_TIMEOUT)")
}

// patch holds the flags that were set, --header aside (subscriptions.HeaderChange).
func (f *subscriptionFlags) patch(cmd *cobra.Command) (subscriptions.Patch, error) {
	var p subscriptions.Patch
	var schedule []subscriptions.Duration
	if cmd.Flags().Changed("schedule") {
		ds, err := config.ParseSchedule(f.schedule)
		if err != nil {
			return p, fmt.Errorf("--schedule: %w", err)
		}
		schedule = make([]subscriptions.Duration, len(ds))
		for i, d := range ds {
			schedule[i] = subscriptions.Duration(d)
		}
	}
	fields := []struct {
		flag string
		set  func()
	}{
		{"url", func() { p.URL = &f.url }},
		{"topic", func() { p.Topic = &f.topic }},
		{"secret", func() { p.Secret = &f.secret }},
		{"description", func() { p.Description = &f.description }},
		{"team", func() { p.Team = &f.team }},
		{"source", func() { p.Sources = &f.sources }},
		{"event-type", func() { p.EventTypes = &f.eventTypes }},
		{"ordered", func() { p.Ordered = &f.ordered }},
		{"max-in-flight", func() { p.MaxInFlight = &f.maxInFlight }},
		{"rate-limit", func() { p.RateLimit = &f.rateLimit }},
		{"batch-max", func() { p.BatchMax = &f.batchMax }},
		{"batch-wait", func() { p.BatchWait = (*subscriptions.Duration)(&f.batchWait) }},
		{"filter", func() { p.Filter = &f.filter }},
		{"transform", func() { p.Transform = &f.transform }},
		{"schedule", func() { p.Schedule = &schedule }},
		{"timeout", func() { p.Timeout = (*subscriptions.Duration)(&f.timeout) }},
	}
	for _, field := range fields {
		if cmd.Flags().Changed(field.flag) {
			field.set()
		}
	}
	return p, nil
}

// headerChange reads --header 'Name: value' and unset (--unset-header
// Name); a name given twice is refused.
func (f *subscriptionFlags) headerChange(unset []string) (subscriptions.HeaderChange, error) {
	h := subscriptions.HeaderChange{Set: make(map[string]string, len(f.headers))}
	for _, kv := range f.headers {
		name, value, ok := strings.Cut(kv, ":")
		name, value = http.CanonicalHeaderKey(strings.TrimSpace(name)), strings.TrimSpace(value)
		if !ok || name == "" {
			return h, fmt.Errorf("--header: %q is not 'Name: value'", kv)
		}
		if _, dup := h.Set[name]; dup {
			return h, fmt.Errorf("--header: %s given twice", name)
		}
		h.Set[name] = value
	}
	for _, name := range unset {
		name = http.CanonicalHeaderKey(strings.TrimSpace(name))
		if _, both := h.Set[name]; both {
			return h, fmt.Errorf("--header and --unset-header both name %s", name)
		}
		h.Unset = append(h.Unset, name)
	}
	return h, nil
}

// withRegistry runs fn with a registry on the configured cluster.
func withRegistry(cmd *cobra.Command, fn func(ctx context.Context, r *subscriptions.Registry) error) error {
	return withClusterRegistry(cmd, func(ctx context.Context, _ cluster, r *subscriptions.Registry) error { return fn(ctx, r) })
}

// withClusterRegistry runs fn with the cluster and its registry.
func withClusterRegistry(cmd *cobra.Command, fn func(ctx context.Context, c cluster, r *subscriptions.Registry) error) error {
	return withCluster(cmd, func(ctx context.Context, c cluster) error {
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		if err := ensureTopics(ctx, c.cfg, c.Client, c.log); err != nil {
			return err
		}
		r, err := c.registry()
		if err != nil {
			return err
		}
		return fn(ctx, c, r)
	})
}

// registry is the subscriptions registry of c, guarded as its
// configuration says.
func (c cluster) registry() (*subscriptions.Registry, error) {
	sec, err := subscriptionSecurity(c.cfg)
	if err != nil {
		return nil, err
	}
	return subscriptions.NewRegistry(c.Cluster, c.log).Secure(sec).Replicas(c.cfg.ReplicationFactor), nil
}

// subscriptionSecurity is how subscriptions are guarded:
// HOOKSTREAM_SECRET_KEY (and _PREVIOUS) and
// HOOKSTREAM_DELIVERY_REQUIRE_HTTPS and HOOKSTREAM_MAX_SUBSCRIPTIONS.
func subscriptionSecurity(cfg *config.Config) (subscriptions.Security, error) {
	sec := subscriptions.Security{RequireHTTPS: cfg.Delivery.RequireHTTPS, MaxSubscriptions: cfg.Delivery.MaxSubscriptions}
	if cfg.SecretKey != nil {
		keys, err := subscriptions.NewSecretKeys(cfg.SecretKey, cfg.SecretKeyPrevious)
		if err != nil {
			return subscriptions.Security{}, err
		}
		sec.Keys = keys
	}
	return sec, nil
}

// deliveryClientConfig is how the dispatcher of cfg delivers.
func deliveryClientConfig(cfg *config.Config) webhook.Config {
	return webhook.Config{
		Timeout:      cfg.Delivery.Timeout,
		AllowPrivate: cfg.Delivery.AllowPrivate,
		RequireHTTPS: cfg.Delivery.RequireHTTPS,
		UserAgent:    "hookstream/" + version,
	}
}

func newSubscriptionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "subscriptions",
		Aliases: []string{"subs"},
		Short:   "Manage subscriber URLs that receive signed deliveries",
		Long: `Subscriptions live in the compacted <prefix>.subscriptions topic. These commands
write it directly, so they work with no hookstream daemon running; running
dispatchers follow every change.`,
	}
	output := new(string)
	cmd.PersistentFlags().StringVarP(output, "output", "o", "table", "output format: table or json")
	config.RegisterFlags(cmd.PersistentFlags(), config.Common)
	cmd.AddCommand(newSubscriptionsAddCommand(output), newSubscriptionsListCommand(output), newSubscriptionsGetCommand(output),
		newSubscriptionsUpdateCommand(output), newSubscriptionsRmCommand(),
		newSubscriptionsRotateCommand(output), newSubscriptionsEnableCommand(output), newSubscriptionsDisableCommand(output))
	cmd.AddCommand(newSubscriptionsTestCommand(output))
	return cmd
}

// subscriptionsAddOptions are the flags of subscriptions add.
type subscriptionsAddOptions struct {
	fields subscriptionFlags
	from   string
	verify bool
	pull   bool
}

func newSubscriptionsAddCommand(output *string) *cobra.Command {
	o := &subscriptionsAddOptions{}
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Create a subscription and print it, secret included",
		Long: `Add creates a subscription and prints it, secret included.

With --verify it first POSTs a verification request to the URL, signed with
the subscription's secret like a delivery:
  {"type":"hookstream.verification","challenge":"<random>"}
and creates the subscription only if the endpoint answers 2xx echoing the
challenge, as the body or as {"challenge":"<random>"} (hookstream sink does).

--filter and --transform are CEL expressions over the event (id, source,
event_id, type, received_at, headers, data, form, replay): the filter must
be true for the event to be delivered, the transform's value, as JSON, is
the body instead of the envelope. An expression that does not compile is
refused ("invalid filter: line L, column C: ..."), nothing written. See
docs/delivery.md, "Subscription controls".

With --topic instead of --url the matching events (the envelope, or the
transform's JSON) are written to that Kafka topic of the same cluster
exactly once, keyed <source>:<event-id>: read it with
isolation.level=read_committed. The topic is created when missing, like
the events topic (partitions, retention); hookstream's own topics, __*
and another subscription's topic are refused. See docs/delivery.md,
"Topic subscriptions".

With HOOKSTREAM_SECRET_KEY set, the secret and the --header values are
stored encrypted; with HOOKSTREAM_DELIVERY_REQUIRE_HTTPS (the default off
the embedded broker), only https URLs are accepted.

--pull creates a pull subscription instead, for consumers that cannot
receive webhooks: it has no URL nor signing secret, but a pull token,
printed here (and by get) on its "pull token:" line, or as pull_token with
--output json, for its consumers to send as "Authorization: Bearer
<token>" to GET /subscriptions/<id>/events on the ingest listener
(hookstream events pull is such a consumer). rotate-secret rotates it,
the old token valid 24 hours. See docs/delivery.md, "Pull subscriptions".`,
		Example: `  hookstream subscriptions add --url https://example.com/hooks
  hookstream subscriptions add --url https://ci.example.com/hook --source github --event-type 'pull_request*' --from earliest
  hookstream subscriptions add --url https://example.com/hooks --batch-max 100 --batch-wait 1s
  hookstream subscriptions add --verify --url https://example.com/hooks --secret whsec_...
  hookstream subscriptions add --url https://billing.example.com/hook --source stripe \
    --filter 'has(data.data.object.amount) && data.data.object.amount > 100000' \
    --header 'Authorization: Bearer s3cret' --schedule 10s,1m,10m --timeout 5s
  hookstream subscriptions add --url https://hooks.slack.com/services/T0/B0/XYZ --source github \
    --transform '{"text": "push to " + data.repository.full_name + " by " + data.pusher.name}'
  hookstream subscriptions add --pull --source stripe --from earliest
  hookstream subscriptions add --topic billing.stripe-payments --source stripe --event-type 'payment_intent.*' --from earliest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSubscriptionsAdd(cmd, *output, o) },
	}
	o.fields.register(cmd)
	cmd.Flags().StringVar(&o.from, "from", "latest", "where delivery starts: latest, earliest or an RFC 3339 time")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "create it only if the URL answers a signed verification challenge")
	cmd.Flags().BoolVar(&o.pull, "pull", false, "a pull subscription: no URL, its consumers read its events with its pull token")
	return cmd
}

// fieldNames are the names of the fields a POST /api/subscriptions of the
// same subscription sets.
func (o *subscriptionsAddOptions) fieldNames(cmd *cobra.Command, p subscriptions.Patch) []string {
	body := struct {
		From *string `json:"from,omitempty"`
		Pull bool    `json:"pull,omitempty"`
		subscriptions.Patch
	}{Pull: o.pull, Patch: p}
	if cmd.Flags().Changed("from") {
		body.From = &o.from
	}
	return fieldNames(body)
}

// runSubscriptionsAdd creates a subscription from the flags set, after
// verifying its endpoint when asked, and prints it.
func runSubscriptionsAdd(cmd *cobra.Command, output string, o *subscriptionsAddOptions) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	p, err := o.fields.patch(cmd)
	if err != nil {
		return err
	}
	headers, err := o.fields.headerChange(nil)
	if err != nil {
		return err
	}
	if len(headers.Set) > 0 {
		p.Headers = &headers.Set
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		s := subscriptions.Subscription{Pull: o.pull}
		p.Apply(&s)
		if s.URL == "" && s.Topic == "" && !s.Pull {
			return fmt.Errorf("--url, --topic or --pull is required")
		}
		if o.verify && s.Kind() != subscriptions.KindWebhook {
			return fmt.Errorf("--verify checks a URL: a %s subscription has none", s.Kind())
		}
		if o.verify {
			if err := verifyEndpoint(ctx, c.cfg, r, &s); err != nil {
				return err
			}
		}
		if err := r.Create(ctx, &s, o.from); err != nil {
			return err
		}
		c.record(ctx, change{action: "subscription.create", target: s.ID, status: http.StatusCreated, fields: o.fieldNames(cmd, p)})
		return printSubscriptions(cmd.OutOrStdout(), output, []subscriptions.Subscription{s}, true)
	})
}

func newSubscriptionsListCommand(output *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List subscriptions with their health (secrets and header values hidden)",
		Long: `List prints every subscription, oldest first, secrets and header values hidden,
with its health as the running hookstream's dispatcher tells it: delivering,
failing (its last attempts failed or its transform dead-lettered the events,
with the reason: "401 Unauthorized"), circuit open, throttled or disabled.

The subscriptions are read from the subscriptions topic; their health is asked
of the admin API of a running hookstream (--admin-addr, with --admin-token
when it has one). When none answers, or it runs no dispatcher, the health is
unknown and one line on stderr says why.`,
		Example: `  hookstream subscriptions list
  hookstream subscriptions list --team payments
  hookstream subscriptions list --admin-addr 10.0.0.5:8081 --admin-token "$HOOKSTREAM_ADMIN_TOKEN" --output json`,
		Args: cobra.NoArgs,
	}
	var team string
	cmd.Flags().StringVar(&team, "team", "", "list only the subscriptions of this team")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runSubscriptionsList(cmd, *output, team, cmd.Flags().Changed("team"))
	}
	config.RegisterFlags(cmd.Flags(), config.Admin)
	return cmd
}

// runSubscriptionsList prints every subscription (byTeam: of team only),
// oldest first, secrets and header values hidden, with its health.
func runSubscriptionsList(cmd *cobra.Command, output, team string, byTeam bool) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	return withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		// A key that opens no secret would list none of their
		// subscriptions: say so rather than print fewer.
		if err := r.CheckKeys(ctx); err != nil {
			return err
		}
		subs, err := r.List(ctx)
		if err != nil {
			return err
		}
		out := make([]subscriptions.Subscription, 0, len(subs))
		for _, s := range subs {
			if !byTeam || s.Team == team {
				out = append(out, s)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
		var health map[string]subscriptions.Health
		if len(out) > 0 {
			health = healthOf(ctx, c.cfg, out, cmd.ErrOrStderr())
		}
		return printSubscriptionsHealth(cmd.OutOrStdout(), output, out, false, health)
	})
}

// healthTimeout bounds the question of the subscriptions' health.
const healthTimeout = 10 * time.Second

// healthOf is the health of subs as the admin API of the running
// hookstream (cfg.AdminAddr) tells it. A subscription it cannot tell of
// is unknown (disabled when it is), and why is written to stderr, one
// line a reason.
func healthOf(ctx context.Context, cfg *config.Config, subs []subscriptions.Subscription, stderr io.Writer) map[string]subscriptions.Health {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	var told []struct {
		ID     string               `json:"id"`
		Health subscriptions.Health `json:"health"`
	}
	raw, err := adminGet(ctx, cfg, "/api/subscriptions")
	if err == nil && json.Unmarshal(raw, &told) != nil {
		err = fmt.Errorf("the admin API at %s answered something other than subscriptions: is --admin-addr hookstream's admin listener?", cfg.AdminAddr)
	}
	known := make(map[string]subscriptions.Health, len(told))
	for _, v := range told {
		known[v.ID] = v.Health
	}
	health := make(map[string]subscriptions.Health, len(subs))
	var reasons []string
	for _, s := range subs {
		h, ok := known[s.ID]
		switch {
		case !ok && !s.Enabled:
			h = subscriptions.Delivery{}.Health(s, false)
		case !ok && err != nil:
			h = subscriptions.Health{State: subscriptions.HealthUnknown, Reason: err.Error()}
		case !ok:
			h = subscriptions.Health{State: subscriptions.HealthUnknown, Reason: fmt.Sprintf("the instance at %s does not know it yet", cfg.AdminAddr)}
		case h.State == subscriptions.HealthUnknown:
			h.Reason = fmt.Sprintf("the instance at %s: %s", cfg.AdminAddr, h.Reason)
		}
		health[s.ID] = h
		if h.State == subscriptions.HealthUnknown && !slices.Contains(reasons, h.Reason) {
			reasons = append(reasons, h.Reason)
		}
	}
	for _, r := range reasons {
		fmt.Fprintf(stderr, "health unknown: %s\n", r)
	}
	return health
}
func newSubscriptionsGetCommand(output *string) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show one subscription, secret or pull token, controls and header values included",
		Example: "  hookstream subscriptions get sub_abc",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runSubscriptionsGet(cmd, *output, args[0]) },
	}
}

// runSubscriptionsGet prints subscription id, secret included.
func runSubscriptionsGet(cmd *cobra.Command, output, id string) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	return withRegistry(cmd, func(ctx context.Context, r *subscriptions.Registry) error {
		s, err := r.Get(ctx, id)
		if err != nil {
			return err
		}
		return printSubscriptions(cmd.OutOrStdout(), output, []subscriptions.Subscription{s}, true)
	})
}

func newSubscriptionsUpdateCommand(output *string) *cobra.Command {
	var fields subscriptionFlags
	var unsetHeaders []string
	cmd := &cobra.Command{
		Use:   "update ID",
		Short: "Change a subscription's fields",
		Long: `Update changes the fields whose flags are given and keeps the others.
--header sets the headers it names and keeps the others; --unset-header
removes one. --filter "", --transform "", --schedule "" and --timeout 0
go back to every event, the envelope and the global settings.`,
		Example: `  hookstream subscriptions update sub_abc --url https://new.example.com/hook
  hookstream subscriptions update sub_abc --batch-max 100 --batch-wait 500ms
  hookstream subscriptions update sub_abc --filter 'data.action == "opened"'
  hookstream subscriptions update sub_abc --filter ""
  hookstream subscriptions update sub_abc --header 'Authorization: Bearer n3w' --unset-header X-Old-Token`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := fields.patch(cmd)
			if err != nil {
				return err
			}
			headers, err := fields.headerChange(unsetHeaders)
			if err != nil {
				return err
			}
			check := p
			check.Headers = &headers.Set // refused alone, refused merged
			edit := func(s *subscriptions.Subscription) {
				p.Apply(s)
				headers.Apply(s)
			}
			named := p
			if len(headers.Set)+len(headers.Unset) > 0 {
				named.Headers = &headers.Set
			}
			ch := change{action: "subscription.update", fields: fieldNames(named)}
			return runSubscriptionsChange(cmd, *output, args[0], check, edit, ch, false)
		},
	}
	fields.register(cmd)
	cmd.Flags().StringArrayVar(&unsetHeaders, "unset-header", nil, "remove this header (repeatable)")
	return cmd
}

func newSubscriptionsEnableCommand(output *string) *cobra.Command {
	return &cobra.Command{
		Use:     "enable ID",
		Short:   "Resume deliveries",
		Example: "  hookstream subscriptions enable sub_abc",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := change{action: "subscription.enable", fields: []string{"enabled"}}
			return runSubscriptionsChange(cmd, *output, args[0], subscriptions.Patch{}, subscriptions.Patch{Enabled: ptr(true)}.Apply, ch, false)
		},
	}
}

func newSubscriptionsDisableCommand(output *string) *cobra.Command {
	return &cobra.Command{
		Use:     "disable ID",
		Short:   "Pause deliveries (events wait in the subscription's group)",
		Example: "  hookstream subscriptions disable sub_abc",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := change{action: "subscription.disable", fields: []string{"enabled"}}
			return runSubscriptionsChange(cmd, *output, args[0], subscriptions.Patch{}, subscriptions.Patch{Enabled: ptr(false)}.Apply, ch, false)
		},
	}
}

// runSubscriptionsChange checks the patch of the flags set, applies edit to
// subscription id, records it in the audit trail as ch (of id, answered
// 200) and prints it, its secret only when withSecret.
func runSubscriptionsChange(cmd *cobra.Command, output, id string, flags subscriptions.Patch, edit func(*subscriptions.Subscription), ch change, withSecret bool) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	if err := flags.Validate(); err != nil {
		return err
	}
	return withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		s, err := r.Update(ctx, id, func(s *subscriptions.Subscription) error {
			edit(s)
			return nil
		})
		if err != nil {
			return err
		}
		ch.target, ch.status = id, http.StatusOK
		c.record(ctx, ch)
		return printSubscriptions(cmd.OutOrStdout(), output, []subscriptions.Subscription{s}, withSecret)
	})
}

func newSubscriptionsRotateCommand(output *string) *cobra.Command {
	var secret string
	cmd := &cobra.Command{
		Use:   "rotate-secret ID",
		Short: "Replace the signing secret (a pull subscription's pull token); the old one stays valid for 24 hours",
		Example: `  hookstream subscriptions rotate-secret sub_abc
  hookstream subscriptions rotate-secret sub_abc --secret whsec_...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rotate := func(s *subscriptions.Subscription) { s.Rotate(secret, time.Now().UTC()) }
			ch := change{action: "subscription.rotate"}
			if cmd.Flags().Changed("secret") {
				ch.fields = []string{"secret"}
			}
			return runSubscriptionsChange(cmd, *output, args[0], subscriptions.Patch{}, rotate, ch, true)
		},
	}
	cmd.Flags().StringVar(&secret, "secret", "", "the new secret or pull token, whsec_ + base64 (generated when not given)")
	return cmd
}

func newSubscriptionsRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Short:   "Delete a subscription",
		Example: "  hookstream subscriptions rm sub_abc",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runSubscriptionsRm(cmd, args[0]) },
	}
}

// runSubscriptionsRm deletes subscription id.
func runSubscriptionsRm(cmd *cobra.Command, id string) error {
	return withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		if err := r.Delete(ctx, id); err != nil {
			return err
		}
		c.record(ctx, change{action: "subscription.delete", target: id, status: http.StatusNoContent})
		fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", id)
		return nil
	})
}

// verifyEndpoint sends s's URL a verification request signed with its
// secret (generated here when not given) and fails unless the endpoint
// echoes the challenge. An endpoint answering 401 or 403 refused the
// signature: the error says to pass the secret it verifies with.
func verifyEndpoint(ctx context.Context, cfg *config.Config, r *subscriptions.Registry, s *subscriptions.Subscription) error {
	if err := r.CheckURL(s.URL); err != nil {
		return err
	}
	generated := s.Secret == ""
	if generated {
		s.Secret = signature.NewSecret()
	}
	key, err := signature.DecodeSecret(s.Secret)
	if err != nil {
		return fmt.Errorf("--secret: %w", err)
	}
	err = webhook.New(deliveryClientConfig(cfg)).Verify(ctx, s.URL, [][]byte{key})
	switch {
	case err == nil:
		return nil
	case !refusedSignature(err):
		return fmt.Errorf("--verify: %w; nothing written", err)
	case generated:
		return fmt.Errorf("--verify: %w: the endpoint refused the signature of a secret generated for it (no --secret given): pass the secret it verifies with as --secret whsec_...; nothing written", err)
	default:
		return fmt.Errorf("--verify: %w: the endpoint refused the signature of --secret: pass the secret it verifies with as --secret; nothing written", err)
	}
}

// refusedSignature reports whether err, of webhook.Client.Verify, is an
// answer 401 or 403: what an endpoint checking signatures answers one
// made with another secret.
func refusedSignature(err error) bool {
	var refused *webhook.RefusedError
	return errors.As(err, &refused) && (refused.Status == http.StatusUnauthorized || refused.Status == http.StatusForbidden)
}

// listed is a subscription as the commands print it in JSON: with its
// health where they tell it (list).
type listed struct {
	subscriptions.Shown
	Health *subscriptions.Health `json:"health,omitempty"`
}

// printSubscriptions prints subs, their secrets only withSecret.
func printSubscriptions(w io.Writer, output string, subs []subscriptions.Subscription, withSecret bool) error {
	return printSubscriptionsHealth(w, output, subs, withSecret, nil)
}

// printSubscriptionsHealth prints subs, their secrets only withSecret,
// and their health when health is not nil.
func printSubscriptionsHealth(w io.Writer, output string, subs []subscriptions.Subscription, withSecret bool, health map[string]subscriptions.Health) error {
	if !withSecret {
		for i := range subs {
			subs[i] = subs[i].Redacted()
		}
	}
	if output == "json" {
		shown := make([]listed, len(subs))
		for i, s := range subs {
			shown[i].Shown = subscriptions.Show(s)
			if h, ok := health[s.ID]; ok {
				shown[i].Health = &h
			}
		}
		if len(subs) == 1 && withSecret {
			return writeJSON(w, shown[0])
		}
		return writeJSON(w, shown)
	}
	if len(subs) == 0 {
		_, err := fmt.Fprintln(w, "no subscriptions")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	healthColumn := ""
	if health != nil {
		healthColumn = "HEALTH\t"
	}
	fmt.Fprintf(tw, "ID\tKIND\tURL/TOPIC\tENABLED\t%sORDERED\tBATCH\tSOURCES\tEVENT TYPES\tSECRET\n", healthColumn)
	for _, s := range subs {
		enabled := fmt.Sprint(s.Enabled)
		if s.DisabledReason != "" {
			enabled += " (" + s.DisabledReason + ")"
		}
		if health != nil {
			enabled += "\t" + healthCell(health[s.ID])
		}
		// Only a webhook has ordering, batching and a secret: a pull
		// subscription's token has a line of its own.
		ordered, batch, secret := "-", "-", "-"
		if s.Kind() == subscriptions.KindWebhook {
			ordered, batch, secret = fmt.Sprint(s.Ordered), "1", s.Secret
			if s.BatchMax > 1 {
				batch = fmt.Sprintf("%d, wait %v", s.BatchMax, s.BatchWait)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Kind(), target(s), enabled, ordered, batch,
			orAll(s.Sources), orAll(s.EventTypes), secret)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(subs) == 1 {
		return printControls(w, subs[0], withSecret)
	}
	return nil
}

// healthCell is h in list's HEALTH column: its state, and its reason but
// a disabled one's (ENABLED says it) and an unknown one's (stderr says it).
func healthCell(h subscriptions.Health) string {
	if h.Reason == "" || h.State == subscriptions.HealthDisabled || h.State == subscriptions.HealthUnknown {
		return h.State
	}
	return h.State + " (" + h.Reason + ")"
}

// target is where s's events go: its URL, or "topic NAME".
func target(s subscriptions.Subscription) string {
	if s.Topic != "" {
		return "topic " + s.Topic
	}
	return s.URL
}

// printControls prints the controls s has, one a line, below the table
// of one subscription: its header values as s holds them (redacted or
// not), and a pull subscription's token withSecret.
func printControls(w io.Writer, s subscriptions.Subscription, withSecret bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// An expression may span lines: its next lines are indented under
	// its first.
	const indent = "\n\t"
	if s.Kind() == subscriptions.KindPull && withSecret {
		fmt.Fprintf(tw, "pull token:\t%s (send it as Authorization: Bearer; keep it secret)\n", s.Secret)
	}
	if s.Filter != "" {
		fmt.Fprintf(tw, "filter:\t%s\n", strings.ReplaceAll(s.Filter, "\n", indent))
	}
	if s.Transform != "" {
		fmt.Fprintf(tw, "transform:\t%s\n", strings.ReplaceAll(s.Transform, "\n", indent))
	}
	for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
		fmt.Fprintf(tw, "header:\t%s: %s\n", name, s.Headers[name])
	}
	if len(s.Schedule) > 0 {
		delays := make([]string, len(s.Schedule))
		for i, d := range s.Schedule {
			delays[i] = d.String()
		}
		fmt.Fprintf(tw, "schedule:\t%s\n", strings.Join(delays, ","))
	}
	if s.Timeout != 0 {
		fmt.Fprintf(tw, "timeout:\t%v\n", s.Timeout)
	}
	return tw.Flush()
}

func orAll(globs []string) string {
	if len(globs) == 0 {
		return "*"
	}
	return strings.Join(globs, ",")
}

func ptr[T any](v T) *T { return &v }
