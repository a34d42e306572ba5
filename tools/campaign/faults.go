package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Fault kinds.
const (
	faultKill    = "kill9"          // SIGKILL a random process, start it again
	faultStop    = "sigstop"        // SIGSTOP a processor past its session timeout, then SIGCONT
	faultRolling = "rolling"        // SIGTERM and restart every process in turn
	faultBroker  = "broker"         // kfake stopped and restarted; one Kafka node kill -9'd and restarted
	faultPoison  = "poison"         // bodies and records that cannot be processed
	faultToggle  = "toggle"         // a subscription disabled and re-enabled with the CLI
	faultReplay  = "replay"         // a subscription's group rewound with `hookstream replay`
	faultReplayP = "procreplay"     // the processor group rewound with `hookstream replay`: events re-emitted, marked
	faultRedrive = "redrive"        // `hookstream dlq redrive` of both DLQs
	faultCrash   = "crash"          // not injected: a process the campaign found dead
	stopFor      = 20 * time.Second // past the processors' 10s session timeout

	// Network faults, through the fault proxies (network.go): on every
	// link (each process to each broker, dispatchers to subscribers) but
	// for the partition.
	faultLatency   = "latency"   // 50ms +- 50ms each way
	faultBandwidth = "bandwidth" // 512 KB/s per connection each way
	faultReset     = "reset"     // every connection reset, and new ones for 3s
	faultBlackhole = "blackhole" // data dropped, connections kept, for holeFor
	faultPartition = "partition" // one processor's broker links black-holed for holeFor
	// faultDiskFull fills the small file system of a processor's data
	// directory for diskFullFor, then frees it.
	faultDiskFull = "diskfull"

	netFaultFor = 20 * time.Second
	resetFor    = 3 * time.Second
	holeFor     = 25 * time.Second // past the 10s session and transaction timeouts
	diskFullFor = 20 * time.Second
)

// networkKinds and diskKinds are the fault kinds of the heavy profile
// beyond the short profile's.
var (
	networkKinds = []string{faultLatency, faultBandwidth, faultReset, faultBlackhole, faultPartition}
	diskKinds    = []string{faultDiskFull}
)

// fault is one scheduled fault: after Gap, Kind hits Target.
type fault struct {
	Kind   string        `json:"kind"`
	Target string        `json:"target,omitempty"`
	Gap    time.Duration `json:"gap"`
}

// planner draws the fault schedule from the seed: the same seed gives
// the same faults, targets and gaps in the same order.
type planner struct {
	rng   *rand.Rand
	base  []string
	procs []string
	procN []string // processors
	nodes int
	gap   [2]time.Duration
	n     int
}

// newPlanner plans the short profile's fault kinds and extra ones.
func newPlanner(seed uint64, brokerKind string, procs, processors []string, nodes int, gap [2]time.Duration, extra ...string) *planner {
	base := []string{faultKill, faultKill, faultKill, faultStop, faultRolling, faultBroker, faultPoison, faultPoison, faultToggle, faultReplay, faultReplayP, faultRedrive,
		faultStorm, faultDeep, faultRogue, faultHeavyExpr}
	if brokerKind == "kafka3" {
		base = append(base, faultBroker)
	}
	base = append(base, extra...)
	p := &planner{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), base: base, procs: procs, procN: processors, nodes: nodes, gap: gap}
	p.rng.Shuffle(len(p.base), func(i, j int) { p.base[i], p.base[j] = p.base[j], p.base[i] })
	return p
}

// next returns the next fault: the shuffled base list first (every kind
// at least once), then kinds drawn at random.
func (p *planner) next() fault {
	var kind string
	if p.n < len(p.base) {
		kind = p.base[p.n]
	} else {
		kind = p.base[p.rng.IntN(len(p.base))]
	}
	p.n++
	f := fault{Kind: kind, Gap: p.gap[0] + time.Duration(p.rng.Int64N(int64(p.gap[1]-p.gap[0])+1))}
	switch kind {
	case faultKill:
		f.Target = p.procs[p.rng.IntN(len(p.procs))]
	case faultStop, faultPartition, faultDiskFull:
		f.Target = p.procN[p.rng.IntN(len(p.procN))]
	case faultBroker:
		f.Target = strconv.Itoa(1 + p.rng.IntN(p.nodes))
	}
	return f
}

// faultResult is what one injected fault did.
type faultResult struct {
	fault
	At       time.Duration `json:"at"`       // since the load started
	Took     time.Duration `json:"took"`     // the injection itself
	Recovery time.Duration `json:"recovery"` // from injection to end-to-end deliveries again
	// Rate is 2xx ingest answers per second from injection to recovery.
	Rate  float64 `json:"accepted_per_second"`
	Error string  `json:"error,omitempty"`
}

// inject runs one fault and returns when its action is over.
func (c *campaign) inject(ctx context.Context, f fault) error {
	switch f.Kind {
	case faultKill:
		p := c.procByName[f.Target]
		p.kill()
		if err := p.start(c.bin); err != nil {
			return err
		}
		return p.waitReady(ctx, 90*time.Second)
	case faultStop:
		p := c.procByName[f.Target]
		if err := p.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		sleepCtx(ctx, stopFor)
		if err := p.signal(syscall.SIGCONT); err != nil {
			return err
		}
		return nil
	case faultRolling:
		for _, p := range c.procs {
			if _, err := p.stop(30 * time.Second); err != nil {
				c.finding("rolling restart: %v", err)
			}
			if err := p.start(c.bin); err != nil {
				return err
			}
			if err := p.waitReady(ctx, 90*time.Second); err != nil {
				return err
			}
		}
		return nil
	case faultBroker:
		node, _ := strconv.Atoi(f.Target)
		return c.broker.bounce(ctx, node, 10*time.Second)
	case faultPoison:
		return c.poison(ctx)
	case faultStorm:
		return c.storm(ctx)
	case faultDeep:
		return c.deepFlood(ctx)
	case faultRogue:
		return c.rogue(ctx)
	case faultHeavyExpr:
		return c.heavyExpr(ctx)
	case faultToggle:
		id := c.subs.byKind[subToggled].id
		if _, err := cli(ctx, c.bin, c.cliEnv, "subscriptions", "disable", id); err != nil {
			return err
		}
		sleepCtx(ctx, 5*time.Second)
		_, err := cli(ctx, c.bin, c.cliEnv, "subscriptions", "enable", id)
		if err == nil {
			c.mu.Lock()
			c.toggles++
			c.mu.Unlock()
		}
		return err
	case faultLatency:
		return c.poisonLinks(ctx, netFaultFor, c.allLinks(), "latency", map[string]any{"latency": 50, "jitter": 50})
	case faultBandwidth:
		return c.poisonLinks(ctx, netFaultFor, c.allLinks(), "bandwidth", map[string]any{"rate": 512})
	case faultReset:
		return c.poisonLinks(ctx, resetFor, c.allLinks(), "reset_peer", map[string]any{"timeout": 0})
	case faultBlackhole:
		return c.poisonLinks(ctx, holeFor, c.allLinks(), "timeout", map[string]any{"timeout": 0})
	case faultPartition:
		return c.poisonLinks(ctx, holeFor, c.net.brokerLinks(f.Target), "timeout", map[string]any{"timeout": 0})
	case faultDiskFull:
		return c.diskFull(ctx, c.procByName[f.Target])
	case faultReplay:
		return c.replay(ctx, "dispatcher", "sub:"+c.subs.byKind[subHealthy].id)
	case faultReplayP:
		return c.replay(ctx, "processor", "processor")
	case faultRedrive:
		if _, err := cli(ctx, c.bin, c.cliEnv, "dlq", "redrive", "--all", "--execute"); err != nil {
			return err
		}
		// Delivery letters go back for the subscribers that recover, as an
		// operator would; a disabled subscription's would wait, parked.
		for _, k := range []string{subDead, subFlap} {
			if _, err := cli(ctx, c.bin, c.cliEnv, "dlq", "redrive", "--dlq", "delivery", "--key", c.subs.byKind[k].id+":*", "--execute"); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// allLinks are the proxies of every process to every broker and the
// dispatchers' to the subscribers.
func (c *campaign) allLinks() []*toxiproxy.Proxy {
	return append(c.net.brokerLinks(), c.net.subs)
}

// poisonLinks adds a toxic to links for d, then removes it.
func (c *campaign) poisonLinks(ctx context.Context, d time.Duration, links []*toxiproxy.Proxy, kind string, attrs map[string]any) error {
	remove, err := c.net.toxic(links, "campaign-"+kind, kind, attrs)
	if err != nil {
		return err
	}
	sleepCtx(ctx, d)
	remove()
	return nil
}

// diskFull fills the file system of p's data directory for diskFullFor.
// A processor whose store Pebble had to abandon stops (its directory
// stays locked while it lives); it is restarted at once, as a supervisor
// would, and waits for room.
func (c *campaign) diskFull(ctx context.Context, p *proc) error {
	n, free, err := fillDisk(filepath.Join(c.work, "data", p.name))
	if err != nil {
		return err
	}
	defer free()
	c.log.Info("disk full", "target", p.name, "filler_bytes", n)
	for end := time.Now().Add(diskFullFor); time.Now().Before(end) && ctx.Err() == nil; {
		if !p.alive() {
			c.log.Info("stopped on the full disk; restarted", "target", p.name)
			if err := p.start(c.bin); err != nil {
				return err
			}
		}
		sleepCtx(ctx, 200*time.Millisecond) // spaces the checks, as a supervisor's
	}
	return nil
}

// replay rewinds a group by 30s with the CLI. The processor group's
// members stop first (replay refuses a group with members) and start
// again after: it re-emits the last 30s, each re-emission marked with its
// replay count. A subscription's group is replayed while the dispatchers
// run, which apply it: the healthy subscription gets the last 30s again.
func (c *campaign) replay(ctx context.Context, role, group string) error {
	var members []*proc
	for _, p := range c.procs {
		if p.roles == role && role != "dispatcher" {
			members = append(members, p)
		}
	}
	for _, p := range members {
		if _, err := p.stop(30 * time.Second); err != nil {
			c.finding("replay of %s: %v", group, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if _, err = cli(ctx, c.bin, c.cliEnv, "replay", "--group", group, "--by-duration", "30s", "--execute"); err == nil {
			break
		}
		sleepCtx(ctx, time.Second) // the group's members leave; poll again
	}
	if err == nil {
		c.mu.Lock()
		c.replays[role]++
		c.mu.Unlock()
	}
	for _, p := range members {
		if e := p.start(c.bin); e != nil {
			return e
		}
	}
	for _, p := range members {
		if e := p.waitReady(ctx, 90*time.Second); e != nil {
			return e
		}
	}
	return err
}

// poisonInput is one input hookstream cannot process.
type poisonInput struct {
	id, kind string
	status   int // HTTP answer; 0 for records written to the ingest topic
}

// poison sends bodies whose envelope cannot fit (form posts of \xff
// bytes near the body limit), invalid JSON, and writes keyless and
// oversized records straight to the ingest topic.
func (c *campaign) poison(ctx context.Context) error {
	c.mu.Lock()
	c.poisonN++
	n := c.poisonN
	c.mu.Unlock()
	client := &http.Client{Timeout: 15 * time.Second}
	post := func(kind, source, id, contentType string, body []byte, want int) error {
		ing := c.ingests[n%len(c.ingests)]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ing.httpAddr+"/webhooks/"+source, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Event-ID", id)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("poison %s: %w", id, err)
		}
		resp.Body.Close()
		c.addPoison(poisonInput{id: source + ":" + id, kind: kind, status: resp.StatusCode})
		if resp.StatusCode != want {
			c.finding("poison %s (%s): answered %d, want %d", id, kind, resp.StatusCode, want)
		}
		return nil
	}
	ff := bytes.Repeat([]byte{0xff}, int(c.maxBody)-64)
	form := append([]byte("a="), ff...)
	invalid := []byte(`{"amount": "ten"}`)
	for _, p := range []struct {
		kind, source, contentType string
		body                      []byte
		want                      int
	}{
		{"form", "poison", "application/x-www-form-urlencoded", form, http.StatusRequestEntityTooLarge},
		{"json", "poison", "application/json", []byte(`{"id": "broken`), http.StatusBadRequest},
		// Accepted, then dead-lettered by the processor (stage validate).
		{"invalid, dlq", sourceChecked, "application/json", invalid, http.StatusAccepted},
		{"invalid, reject", sourceStrict, "application/json", invalid, http.StatusUnprocessableEntity},
	} {
		if err := post(p.kind, p.source, fmt.Sprintf("%s-%d", strings.ReplaceAll(p.kind, ", ", "-"), n), p.contentType, p.body, p.want); err != nil {
			return err
		}
	}

	// A value that fits the ingest topic, but whose envelope (base64, 4/3
	// of it) cannot fit the events topic.
	big := make([]byte, topics.MaxRecordBytes(c.maxBody)-48<<10)
	_, _ = crand.Read(big)
	rec := func(id string, key []byte, value []byte) *kgo.Record {
		return &kgo.Record{Topic: string(c.names.Ingest), Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte("poison")},
			{Key: topics.HeaderEventID, Value: []byte(id)},
			{Key: topics.HeaderEventType, Value: []byte("poison")},
			{Key: topics.HeaderReceivedAt, Value: []byte(time.Now().UTC().Format(topics.TimeFormat))},
			{Key: topics.HeaderContentType, Value: []byte("application/octet-stream")},
		}}
	}
	keyless := fmt.Sprintf("keyless-%d", n)
	oversized := fmt.Sprintf("oversized-%d", n)
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.producer.ProduceSync(pctx,
		rec(keyless, nil, []byte(`{"id":"keyless"}`)),
		rec(oversized, []byte("poison:"+oversized), big),
	).FirstErr(); err != nil {
		return fmt.Errorf("poison records: %w", err)
	}
	c.addPoison(poisonInput{id: keyless, kind: "keyless record"})
	c.addPoison(poisonInput{id: oversized, kind: "oversized record"})
	return nil
}

func (c *campaign) addPoison(p poisonInput) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.poisonList = append(c.poisonList, p)
}

func (c *campaign) poisons() []poisonInput {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]poisonInput(nil), c.poisonList...)
}

// recover waits until every process is alive and ready and the healthy
// subscriber got an event accepted after since: the pipeline delivers
// end to end again. Dead processes are restarted and reported.
func (c *campaign) recover(ctx context.Context, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	healthy := c.subs.byKind[subHealthy]
	for {
		for _, p := range c.procs {
			if !p.alive() {
				c.finding("%s was found dead (not by a fault); restarted. Log: %s", p.name, p.logPath)
				c.mu.Lock()
				c.crashes++
				c.mu.Unlock()
				if err := p.start(c.bin); err != nil {
					return err
				}
			}
		}
		ready := true
		for _, p := range c.procs {
			if err := p.waitReady(ctx, 0); err != nil {
				ready = false
				break
			}
		}
		if ready {
			for _, k := range c.load.acceptedSince(since, 200) {
				if healthy.received(k) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no end-to-end delivery of an event accepted after the fault within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
