// Command campaign runs a seeded fault campaign against a multi-instance
// hookstream deployment and checks its guarantees afterwards.
//
// It builds the real binary and runs it as separate processes with split
// roles (2 ingest, 3 processors, 2 dispatchers, each with its own data
// directory, admin address and HOOKSTREAM_INSTANCE_ID) on kfake hosted in
// this process, or on a 3-node Apache Kafka cluster started by
// scripts/kafka-local.sh. Open-loop load from internal/loadgen (20%
// duplicate ids, several sources spread over the ingest instances) runs
// while faults drawn from the seed hit the deployment: kill -9 and
// restart, a graceful rolling restart, SIGSTOP past the session timeout,
// a broker stopped and restarted, poison inputs, subscription toggles, a
// replay and a DLQ redrive, and the adversary's faults: one event tried by
// many failing subscriptions, a flood of deeply nested JSON, a rogue
// member of the processor group, and a subscription whose filter walks
// payloads built to cost it the most (heavyexpr). Loopback subscribers are healthy, slow,
// flaky, dead then recovering, flapping, gone (410), toggled, batched,
// filtered (a CEL filter) and transformed (a CEL transform as the body).
//
// Once faults stop and the system quiesces it checks: (1) every event
// answered 202 or 200 is on <prefix>.events exactly once; (2) every such
// event reached every enabled subscription that asks for it, or is in
// the delivery DLQ with the subscriber's own failure, the filtered
// subscriber received nothing its filter refuses and the transformed one
// only its transform's bodies; (3) every poison input was refused
// with a 4xx or is in the processor DLQ; (4) every group's lag is 0; (5)
// no process exceeded the memory bound; (6) no trust boundary was crossed
// (no credential reached the rogue member, no forged story was shown,
// every stormed event's story kept its bound); (8) while a subscription
// with an expensive filter ran beside them (heavyexpr), the healthy
// subscribers received their events within paceBound at p99; (9) while
// the faults ran, access tokens were made and revoked through the admin
// API every 10 s and each revoked token kept being tried: none was
// accepted more than 5 s after its revocation. It writes a JSON and a text
// summary and exits 1 when an invariant fails.
//
//	go run ./tools/campaign --profile short --broker kfake
//	go run ./tools/campaign --profile long --broker kafka3 --brokers 127.0.0.1:19092,...
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/tools/internal/program"
	"github.com/hookstream/hookstream/topics"
)

// profile sizes a campaign.
type profile struct {
	minLoad    time.Duration    // load runs at least this long
	warmup     time.Duration    // load before the first fault
	maxFaults  int              // 0: as many as fit in minLoad
	gap        [2]time.Duration // between faults, drawn from the seed
	rate       float64          // requests per second per source
	quiesce    time.Duration    // bound for invariants 1, 2 and 4 after the last fault
	deadRecovr time.Duration    // the dead subscriber recovers this long after the load starts
	bodyMax    int              // bodies from 256 B to this many bytes (0: all 256 B)
	// fan is how many subscriptions there are beyond one of each kind,
	// of the fanKinds in turn.
	fan int
	// extra are fault kinds beyond the short profile's: network kinds
	// put the fault proxies in the deployment's paths, disk kinds mount
	// each processor's data directory on a small file system.
	extra []string
}

var profiles = map[string]profile{
	"short": {minLoad: 3 * time.Minute, warmup: 15 * time.Second, maxFaults: 0, gap: [2]time.Duration{3 * time.Second, 8 * time.Second},
		rate: 10, quiesce: 4 * time.Minute, deadRecovr: 45 * time.Second},
	// many: the short profile with 200 subscriptions (one of each kind, a
	// topic and a pull one, the others of the fanKinds in turn), replayed
	// while running. Each
	// event is about 200 deliveries, so the load is a fifth of short's:
	// 8 events/s, 1,600 deliveries/s and their retries.
	"many": {minLoad: 3 * time.Minute, warmup: 15 * time.Second, maxFaults: 0, gap: [2]time.Duration{3 * time.Second, 8 * time.Second},
		rate: 2, quiesce: 6 * time.Minute, deadRecovr: 45 * time.Second, fan: 200 - len(subKinds) - 2},
	"long": {minLoad: 30 * time.Minute, warmup: 30 * time.Second, gap: [2]time.Duration{20 * time.Second, 60 * time.Second},
		rate: 10, quiesce: 6 * time.Minute, deadRecovr: 3 * time.Minute},
	// heavy: open-loop load at about 70% of what the deployment sustains
	// on the 2-core development machine (169/s, RELIABILITY.md), bodies up to
	// near the body limit, and the network and disk faults too.
	"heavy": {minLoad: 6 * time.Minute, warmup: 30 * time.Second, gap: [2]time.Duration{3 * time.Second, 8 * time.Second},
		rate: heavyRate / float64(len(sources)), quiesce: 5 * time.Minute, deadRecovr: time.Minute,
		bodyMax: 63 << 10, extra: append(append([]string(nil), networkKinds...), diskKinds...)},
}

// heavyRate is the heavy profile's requests per second, all sources
// together.
const heavyRate = 120

func (p profile) network() bool {
	return slices.ContainsFunc(p.extra, func(k string) bool { return slices.Contains(networkKinds, k) })
}

func (p profile) disks() bool {
	return slices.ContainsFunc(p.extra, func(k string) bool { return slices.Contains(diskKinds, k) })
}

var sources = []string{"alpha", "beta", "gamma", "delta"}

type campaign struct {
	seed       uint64
	prof       profile
	bin        string
	work       string
	names      topics.Names
	maxBody    int64
	broker     *broker
	procs      []*proc
	procByName map[string]*proc
	ingests    []*proc
	cliEnv     []string
	subs       *subscribers
	puller     *puller
	// slowPullers read the pull subscription too, slowly.
	slowPullers []*puller
	// topicSub is the topic subscriber's topic (campaignFilter's events).
	topicSub topics.Topic
	load     *recorder
	producer *kgo.Client
	log      *slog.Logger
	net      *network // the fault proxies, when the profile has network faults

	// revoker makes, revokes and probes access tokens while the faults
	// run (invariant 9); stopRevoker stops it and waits.
	revoker     *revoker
	stopRevoker func()

	mu         sync.Mutex
	findings   []string
	poisonList []poisonInput
	poisonN    int
	replays    map[string]int // role -> replays of its group
	toggles    int            // subscription toggles done
	crashes    int
	stormN     int
	stormKeys  []string // events tried by a storm of failing subscriptions
	violations []string // trust boundaries the adversary crossed
	token      string   // the admin token of every process
	// subAddr is where the subscribers listen (through the fault proxy
	// when there is one).
	subAddr string
	heavyN  int // heavy payloads posted
	// heavyWindows are the heavyexpr faults' spans.
	heavyWindows [][2]time.Time

	// taken are the loopback addresses handed out.
	taken map[string]bool
	// undo is what the steps set up and the campaign's end undoes, the
	// last first (cleanUp).
	undo []func()
}

// Sources with payload validation; every other source is accepted
// unverified. Bodies must be objects with an integer amount.
const (
	sourceChecked = "checked" // on_invalid: dlq
	sourceStrict  = "strict"  // on_invalid: reject
	sourcesYAML   = `allow_unknown_sources: true
sources:
  checked:
    validate: {schemas: {"*": ./amount.json}, on_invalid: dlq}
  strict:
    validate: {schemas: {"*": ./amount.json}, on_invalid: reject}
`
	amountSchema = `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
 "required": ["amount"], "properties": {"amount": {"type": "integer"}}}`
)

// writeSources writes the sources file and its schema into dir and
// returns the file's path.
func writeSources(dir string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "amount.json"), []byte(amountSchema), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sources.yaml")
	return path, os.WriteFile(path, []byte(sourcesYAML), 0o644)
}

// startLoad starts one open-loop generator per source, at rate requests
// per second each, the sources spread over the ingest instances; the
// function it returns stops them and returns their reports.
func (c *campaign) startLoad(ctx context.Context, rate float64) (stop func() []loadgen.Report) {
	ctx, cancel := context.WithCancel(ctx)
	httpClient := &http.Client{Transport: c.load, Timeout: 15 * time.Second}
	var wg sync.WaitGroup
	reports := make([]loadgen.Report, len(sources))
	for i, src := range sources {
		ing := c.ingests[i%len(c.ingests)]
		wg.Go(func() {
			r, err := loadgen.Run(ctx, loadgen.Config{
				URL: "http://" + ing.httpAddr + "/webhooks/" + src, Source: src,
				Rate: rate, Concurrency: 64, Duration: 24 * time.Hour, BodySize: 256, MaxBodySize: c.prof.bodyMax, Duplicates: 0.2,
			}, httpClient, nil, nil)
			if err != nil {
				c.finding("load %s: %v", src, err)
			}
			reports[i] = r
		})
	}
	return sync.OnceValue(func() []loadgen.Report {
		cancel()
		wg.Wait()
		return reports
	})
}

// pids names the running processes of the deployment by pid.
func (c *campaign) pids() map[int]string {
	out := make(map[int]string, len(c.procs))
	for _, p := range c.procs {
		if cmd, _ := p.current(); cmd != nil && p.alive() {
			out[cmd.Process.Pid] = p.name
		}
	}
	return out
}

// addSubscription runs `hookstream subscriptions add` with args, trying
// again while the topics just created are not known to every broker, and
// returns the subscription's id and, for a pull subscription, its token.
func (c *campaign) addSubscription(ctx context.Context, args ...string) (id, pullToken string, err error) {
	var out []byte
	for try := 0; ; try++ {
		out, err = cli(ctx, c.bin, c.cliEnv, append(args, "--output", "json")...)
		if err == nil {
			break
		}
		if try == 30 {
			return "", "", err
		}
		c.log.Info("subscriptions add failed; trying again", "err", err)
		sleepCtx(ctx, time.Second)
	}
	var s struct {
		ID        string `json:"id"`
		PullToken string `json:"pull_token"`
	}
	if err := json.Unmarshal(out, &s); err != nil || s.ID == "" {
		return "", "", fmt.Errorf("subscriptions add: %q: %v", out, err)
	}
	return s.ID, s.PullToken, nil
}

func (c *campaign) replayCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.replays)
}

func (c *campaign) finding(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.log.Warn("finding", "what", msg)
	c.mu.Lock()
	c.findings = append(c.findings, msg)
	c.mu.Unlock()
}

func main() {
	var (
		profName   = flag.String("profile", "short", "short (3+ minutes, 11+ faults), many (short with 200 subscriptions), heavy (6+ minutes of heavy load, network and disk faults too) or long (30 minutes)")
		brokerKind = flag.String("broker", "kfake", "kfake (in this process) or kafka3 (Apache Kafka via scripts/kafka-local.sh)")
		brokers    = flag.String("brokers", "", "kafka3: bootstrap list (default: HOOKSTREAM_CAMPAIGN_BROKERS)")
		script     = flag.String("script", "scripts/kafka-local.sh", "kafka3: the script whose stop-broker N and start-broker N bounce a node")
		seed       = flag.Uint64("seed", 0, "seed of the fault schedule (0: from the clock); the same seed replays the same schedule")
		bin        = flag.String("bin", "", "hookstream binary (default: built from ./cmd/hookstream)")
		work       = flag.String("work", "", "work directory for data and logs (default: a new temporary one)")
		out        = flag.String("out", "", "write the JSON summary here (default: <work>/summary.json)")
		duration   = flag.Duration("duration", 0, "override the profile's least load duration")
		faults     = flag.Int("faults", 0, "stop after this many faults (default: every kind at least once, for the whole duration)")
		rate       = flag.Float64("rate", 0, "override the profile's load: requests per second, all sources together")
		measure    = flag.Bool("measure", false, "inject no fault: raise the load from --rate step by step and report the highest rate the deployment sustains")
	)
	program.Main("campaign", func(ctx context.Context) error {
		log := program.Logger(slog.LevelInfo)
		// Toxiproxy's toxics log through zerolog's global logger: its trace
		// lines say nothing the campaign does not.
		zerolog.SetGlobalLevel(zerolog.Disabled)

		prof, ok := profiles[*profName]
		if !ok {
			return program.Usage("--profile %q: want short, heavy or long", *profName)
		}
		if *duration > 0 {
			prof.minLoad = *duration
		}
		if *faults > 0 {
			prof.maxFaults = *faults
		}
		var rateFlag string
		if *rate > 0 {
			prof.rate = *rate / float64(len(sources))
			rateFlag = fmt.Sprintf(" --rate %g", *rate)
		}
		if *seed == 0 {
			*seed = uint64(time.Now().UnixNano() % 1e9)
		}
		fmt.Printf("campaign: seed %d, profile %s, broker %s (replay with --seed %d)\n", *seed, *profName, *brokerKind, *seed)
		sum, err := runCampaign(ctx, log, config{
			seed: *seed, profName: *profName, prof: prof, brokerKind: *brokerKind, brokers: *brokers,
			script: *script, bin: *bin, work: *work, out: *out, measure: *measure, rateFlag: rateFlag,
		})
		if err != nil {
			return program.Exit(2, fmt.Errorf("%v (seed %d)", err, *seed))
		}
		if !sum.Passed {
			return program.Exit(1, nil)
		}
		return nil
	})
}

type config struct {
	seed                   uint64
	profName               string
	prof                   profile
	brokerKind, brokers    string
	script, bin, work, out string
	measure                bool
	rateFlag               string // " --rate N" when the rate was set
}

// runCampaign runs a campaign, step by step: a broker, the topics, the
// subscribers, the deployment, the load and the faults, then the wait for
// the invariants to hold, and the summary.
func runCampaign(ctx context.Context, log *slog.Logger, cfg config) (*summary, error) {
	work, release, err := claimWork(cfg.work)
	if err != nil {
		return nil, err
	}
	defer release()
	c, err := newCampaign(ctx, log, cfg, work)
	if err != nil {
		return nil, err
	}
	defer c.cleanUp()
	if err := c.startBroker(ctx, cfg); err != nil {
		return nil, err
	}
	if err := c.configure(ctx, cfg.brokerKind); err != nil {
		return nil, err
	}
	if err := c.subscribe(ctx); err != nil {
		return nil, err
	}
	procNames, processors, err := c.layOut()
	if err != nil {
		return nil, err
	}
	kinds := c.mountDisks(processors)
	if err := c.startDeployment(ctx); err != nil {
		return nil, err
	}
	c.sampleMemory(ctx)

	c.load = newRecorder()
	if cfg.measure {
		return &summary{Passed: true}, c.measure(ctx)
	}
	loadStart := c.load.start
	stopLoad := c.startTraffic(ctx)
	plan := newPlanner(c.seed, c.broker.kind, procNames, processors, c.broker.nodes, c.prof.gap, kinds...)
	results := c.runFaults(ctx, plan)
	lastFault, loadEnd, reports := c.endLoad(ctx, stopLoad)
	c.removeGone(ctx)
	o, quiesced := c.quiesce(ctx, lastFault)
	c.checkAlive()
	sum := c.summarize(cfg, results, reports, o, loadStart, loadEnd, lastFault, quiesced)
	c.stopDeployment(sum)
	if err := c.writeSummary(cfg, sum); err != nil {
		return nil, err
	}
	return sum, nil
}

// claimWork makes the work directory (a new temporary one when dir is
// empty) and its logs directory, and claims it for this campaign: two
// would share data directories. release gives it up.
func claimWork(dir string) (work string, release func(), err error) {
	work = dir
	if work == "" {
		if work, err = os.MkdirTemp("", "hookstream-campaign-"); err != nil {
			return "", nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(work, "logs"), 0o755); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(work, "campaign.lock"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("work directory %s: %w (another campaign uses it?)", work, err)
	}
	lock.Close()
	fmt.Printf("campaign: work directory %s (process logs in logs/)\n", work)
	return work, func() { os.Remove(lock.Name()) }, nil
}

// newCampaign is a campaign in work, with its topic names, its
// subscribers and admin token, and the hookstream binary (built unless
// cfg names one).
func newCampaign(ctx context.Context, log *slog.Logger, cfg config, work string) (*campaign, error) {
	c := &campaign{
		seed: cfg.seed, prof: cfg.prof, work: work, maxBody: 64 << 10, log: log,
		names:      topics.NewNames(fmt.Sprintf("cmp%d-%d", cfg.seed, time.Now().Unix()%100000)),
		procByName: make(map[string]*proc),
		subs:       newSubscribers(cfg.prof.fan),
		replays:    make(map[string]int),
		taken:      make(map[string]bool),
	}

	c.token = rand.Text()
	c.bin = cfg.bin
	if c.bin == "" {
		c.bin = filepath.Join(work, "hookstream")
		log.Info("building hookstream", "bin", c.bin)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", c.bin, "./cmd/hookstream").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/hookstream (run from the repository root): %w\n%s", err, out)
		}
	}
	return c, nil
}

// onExit adds undo to what the campaign undoes when it ends, the last
// added first, as defers run.
func (c *campaign) onExit(undo func()) { c.undo = append(c.undo, undo) }

// cleanUp undoes what the steps set up, the last first.
func (c *campaign) cleanUp() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
}

// startBroker starts kfake in this process or joins the kafka3 cluster,
// and with network faults the fault proxies in front of the brokers.
func (c *campaign) startBroker(ctx context.Context, cfg config) error {
	// With network faults every process reaches the brokers through
	// fronts (network.go): fronts[i] is what broker i advertises,
	// upstreams[i] its listener.
	var (
		fronts, upstreams []string
		err               error
	)
	switch cfg.brokerKind {
	case "kfake":
		fronts, upstreams, err = c.hostKfake()
	case "kafka3":
		fronts, upstreams, err = c.joinKafka3(ctx, cfg)
	default:
		return fmt.Errorf("--broker %q: want kfake or kafka3", cfg.brokerKind)
	}
	if err != nil {
		return err
	}
	c.onExit(c.broker.close)
	if fronts != nil {
		c.net, err = newNetwork(fronts, upstreams, c.log.With("component", "network"))
		if err != nil {
			return err
		}
		c.onExit(c.net.close)
	}
	return nil
}

// hostKfake starts kfake in this process, on its own loopback address;
// with network faults it advertises another, the fault proxy's.
func (c *campaign) hostKfake() (fronts, upstreams []string, err error) {
	addr, err := freeAddr(c.taken)
	if err != nil {
		return nil, nil, err
	}
	var advertise string
	if c.prof.network() {
		if advertise, err = freeAddr(c.taken); err != nil {
			return nil, nil, err
		}
		fronts, upstreams = []string{advertise}, []string{addr}
	}
	c.broker, err = startKfake(filepath.Join(c.work, "broker"), addr, advertise, c.log.With("component", "kfake"))
	if err != nil {
		return nil, nil, err
	}
	return fronts, upstreams, nil
}

// joinKafka3 takes the kafka3 cluster's brokers from --brokers (or
// HOOKSTREAM_CAMPAIGN_BROKERS); with network faults, the proxies its
// script put in front of them.
func (c *campaign) joinKafka3(ctx context.Context, cfg config) (fronts, upstreams []string, err error) {
	list := cfg.brokers
	if list == "" {
		list = os.Getenv("HOOKSTREAM_CAMPAIGN_BROKERS")
	}
	if list == "" {
		return nil, nil, errors.New("--broker kafka3 needs --brokers (the list `scripts/kafka-local.sh start --brokers 3` prints)")
	}
	seeds := strings.Split(list, ",")
	c.broker = &broker{kind: "kafka3", seeds: seeds, nodes: len(seeds), script: cfg.script, log: c.log}
	if c.prof.network() {
		out, err := exec.CommandContext(ctx, cfg.script, "proxies").Output()
		if err != nil {
			return nil, nil, fmt.Errorf("%s proxies: %w (network faults need the cluster started with --proxy-port)", cfg.script, err)
		}
		for pair := range strings.SplitSeq(strings.TrimSpace(string(out)), ",") {
			front, up, ok := strings.Cut(pair, "=")
			if !ok {
				return nil, nil, fmt.Errorf("%s proxies: %q is not front=listener", cfg.script, pair)
			}
			fronts, upstreams = append(fronts, front), append(upstreams, up)
		}
		c.broker.seeds = fronts
	}
	return fronts, upstreams, nil
}

// configure writes the sources file, sets the environment every process
// and command shares, creates the topics and opens the producer the
// faults write with.
func (c *campaign) configure(ctx context.Context, brokerKind string) error {
	config, err := writeSources(c.work)
	if err != nil {
		return err
	}
	common := append(baseEnviron(),
		"HOOKSTREAM_CONFIG="+config,
		"HOOKSTREAM_BROKERS="+strings.Join(c.broker.seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX="+c.names.Prefix,
		"HOOKSTREAM_PARTITIONS=6",
		fmt.Sprintf("HOOKSTREAM_MAX_BODY=%d", c.maxBody),
		"HOOKSTREAM_DELIVERY_SCHEDULE=200ms,500ms,1s,2s",
		"HOOKSTREAM_DELIVERY_TIMEOUT=3s",
		"HOOKSTREAM_DELIVERY_ALLOW_PRIVATE=true",
		"HOOKSTREAM_DELIVERY_BREAKER_COOLDOWN=200ms",
		"HOOKSTREAM_DELIVERY_DISABLE_AFTER=1h",
		"HOOKSTREAM_ACK_TIMEOUT=10s",
		"HOOKSTREAM_ADMIN_TOKEN="+c.token,
	)
	if brokerKind == "kafka3" {
		common = append(common, fmt.Sprintf("HOOKSTREAM_REPLICATION_FACTOR=%d", c.broker.nodes))
	}
	c.cliEnv = common
	if _, err := cli(ctx, c.bin, c.cliEnv, "topics", "create"); err != nil {
		return err
	}

	c.producer, err = kgo.NewClient(kgo.SeedBrokers(c.broker.seeds...),
		kgo.ProducerBatchMaxBytes(int32(topics.MaxRecordBytes(c.maxBody))), kgo.RecordRetries(20))
	if err != nil {
		return err
	}
	c.onExit(c.producer.Close)
	return nil
}

// subscribe serves the subscribers and registers them with the CLI
// before any event: the topic subscriber, one subscription per
// subscriber and the pull subscription, whose client it makes.
func (c *campaign) subscribe(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	subSrv := &http.Server{Handler: c.subs, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = subSrv.Serve(ln) }() // ends with Close below
	c.onExit(func() { subSrv.Close() })
	c.subAddr = ln.Addr().String()
	if c.net != nil {
		if c.subAddr, err = c.net.proxySubscribers(c.subAddr); err != nil {
			return err
		}
	}
	// The topic subscriber: the filtered subscriber's events, written to
	// a topic of its own exactly once.
	c.topicSub = topics.Topic(c.names.Prefix + "-campaign-topic")
	if _, _, err := c.addSubscription(ctx, "subscriptions", "add", "--topic", string(c.topicSub), "--filter", campaignFilter,
		"--from", "earliest", "--description", "campaign topic"); err != nil {
		return err
	}
	for _, sub := range c.subs.all() {
		// Topics just created may not be known to every broker yet: poll.
		args := append([]string{"subscriptions", "add", "--url", "http://" + c.subAddr + c.subs.path(sub),
			"--from", "earliest", "--description", "campaign " + sub.kind}, addFlags[sub.kind]...)
		if sub.id, _, err = c.addSubscription(ctx, args...); err != nil {
			return err
		}
	}
	pullID, pullToken, err := c.addSubscription(ctx, "subscriptions", "add", "--pull", "--from", "earliest", "--description", "campaign pull")
	if err != nil {
		return err
	}
	c.puller = newPuller(pullID, pullToken, c.seed, 0)
	for i := range slowPullers {
		c.slowPullers = append(c.slowPullers, newPuller(pullID, pullToken, c.seed+uint64(i)+1, slowPullRate))
	}
	far := time.Now().Add(24 * time.Hour).UnixNano()
	c.subs.byKind[subDead].recoverAt.Store(far)
	c.subs.byKind[subFlap].flapUntil.Store(far)
	return nil
}

// layOut gives every process of the deployment its addresses, data
// directory and environment (and, with network faults, its proxies) and
// returns the names of the processes and of the processors.
func (c *campaign) layOut() (procNames, processors []string, err error) {
	layout := []struct{ name, roles string }{
		{"ingest-1", "ingest"}, {"ingest-2", "ingest"},
		{"processor-1", "processor"}, {"processor-2", "processor"}, {"processor-3", "processor"},
		{"dispatcher-1", "dispatcher"}, {"dispatcher-2", "dispatcher"},
	}
	for _, l := range layout {
		httpAddr, err := freeAddr(c.taken)
		if err != nil {
			return nil, nil, err
		}
		adminAddr, err := freeAddr(c.taken)
		if err != nil {
			return nil, nil, err
		}
		p := &proc{name: l.name, roles: l.roles, httpAddr: httpAddr, adminAddr: adminAddr,
			logPath: filepath.Join(c.work, "logs", l.name+".log")}
		p.env = append(append([]string(nil), c.cliEnv...),
			"HOOKSTREAM_DATA_DIR="+filepath.Join(c.work, "data", l.name),
			"HOOKSTREAM_HTTP_ADDR="+httpAddr,
			"HOOKSTREAM_ADMIN_ADDR="+adminAddr,
			"HOOKSTREAM_INSTANCE_ID="+l.name,
		)
		c.procs = append(c.procs, p)
		c.procByName[l.name] = p
		procNames = append(procNames, l.name)
		switch l.roles {
		case "ingest":
			c.ingests = append(c.ingests, p)
		case "processor":
			processors = append(processors, l.name)
		}
		if c.net != nil {
			if err := c.net.addProcess(l.name); err != nil {
				return nil, nil, err
			}
		}
	}
	return procNames, processors, nil
}

// mountDisks puts each processor's data directory on a small file system
// that the diskfull fault fills, when the profile has disk faults, and
// returns the profile's extra fault kinds: without the right to mount
// one, no diskfull.
func (c *campaign) mountDisks(processors []string) (extra []string) {
	extra = c.prof.extra
	if !c.prof.disks() {
		return extra
	}
	for _, name := range processors {
		dir := filepath.Join(c.work, "data", name)
		if err := mountSmallDisk(dir); err != nil {
			c.finding("no diskfull faults: %v", err)
			return slices.DeleteFunc(slices.Clone(extra), func(k string) bool { return slices.Contains(diskKinds, k) })
		}
		c.onExit(func() { unmountSmallDisk(dir) })
	}
	return extra
}

// startDeployment starts every process and waits until each is ready;
// they are killed when the campaign ends.
func (c *campaign) startDeployment(ctx context.Context) error {
	if c.net != nil {
		c.net.follow(c.pids)
	}
	c.onExit(func() {
		for _, p := range c.procs {
			p.kill()
		}
	})
	for _, p := range c.procs {
		if err := p.start(c.bin); err != nil {
			return err
		}
	}
	for _, p := range c.procs {
		if err := p.waitReady(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// sampleMemory samples every process's resident set each second until
// the campaign ends (invariant 5).
func (c *campaign) sampleMemory(ctx context.Context) {
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var samplerWG sync.WaitGroup
	samplerWG.Go(func() {
		for {
			for _, p := range c.procs {
				p.sampleRSS()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
	c.onExit(func() { stopSampling(); samplerWG.Wait() })
}

// startTraffic starts the load and the pull client, and sets when the
// dead subscriber recovers; stopLoad stops the load and returns its
// reports.
func (c *campaign) startTraffic(ctx context.Context) (stopLoad func() []loadgen.Report) {
	c.subs.byKind[subDead].recoverAt.Store(c.load.start.Add(c.prof.deadRecovr).UnixNano())
	stopLoad = c.startLoad(ctx, c.prof.rate)
	c.onExit(func() { stopLoad() })
	pullCtx, stopPull := context.WithCancel(ctx)
	c.onExit(stopPull)
	addrs := func() []string {
		addrs := make([]string, len(c.ingests))
		for i, p := range c.ingests {
			addrs[i] = p.httpAddr
		}
		return addrs
	}
	for _, p := range append([]*puller{c.puller}, c.slowPullers...) {
		go p.run(pullCtx, addrs)
	}
	c.revoker = newRevoker(c.token, c.procs)
	revokeCtx, stopRevoking := context.WithCancel(ctx)
	revoked := make(chan struct{})
	go func() { c.revoker.run(revokeCtx); close(revoked) }()
	c.stopRevoker = func() { stopRevoking(); <-revoked }
	c.onExit(c.stopRevoker)
	return stopLoad
}

// runFaults injects plan's faults one after another once the warm-up
// is over, until the load has run for the profile's least duration and
// every kind of the plan struck, or the profile's most faults did.
func (c *campaign) runFaults(ctx context.Context, plan *planner) []faultResult {
	loadStart := c.load.start
	var results []faultResult
	sleepCtx(ctx, c.prof.warmup)
	for ctx.Err() == nil {
		enough := time.Since(loadStart) >= c.prof.minLoad && len(results) >= len(plan.base)
		if enough || (c.prof.maxFaults > 0 && len(results) >= c.prof.maxFaults) {
			break
		}
		f := plan.next()
		sleepCtx(ctx, f.Gap)
		results = append(results, c.runFault(ctx, f, len(results)+1))
	}
	return results
}

// runFault injects f, the campaign's nth fault, and waits for the
// deployment to recover from it.
func (c *campaign) runFault(ctx context.Context, f fault, n int) faultResult {
	loadStart := c.load.start
	start := time.Now()
	c.log.Info("fault", "n", n, "kind", f.Kind, "target", f.Target, "at", start.Sub(loadStart).Round(time.Millisecond))
	res := faultResult{fault: f, At: start.Sub(loadStart)}
	if err := c.inject(ctx, f); err != nil {
		res.Error = err.Error()
		c.finding("fault %s %s: %v", f.Kind, f.Target, err)
	}
	res.Took = time.Since(start)
	if err := c.recover(ctx, time.Now(), 3*time.Minute); err != nil {
		res.Error = strings.TrimPrefix(res.Error+"; ", "; ") + err.Error()
		c.finding("after fault %s %s: %v", f.Kind, f.Target, err)
	}
	res.Recovery = time.Since(start)
	res.Rate = c.load.rate(start, time.Now())
	c.log.Info("recovered", "kind", f.Kind, "target", f.Target, "took", res.Took.Round(time.Millisecond), "recovery", res.Recovery.Round(time.Millisecond))
	return res
}

// endLoad, after the last fault, lets the flapping and the dead
// subscribers heal, runs the load with no fault for a while, then stops
// it.
func (c *campaign) endLoad(ctx context.Context, stopLoad func() []loadgen.Report) (lastFault, loadEnd time.Time, reports []loadgen.Report) {
	lastFault = time.Now()
	c.subs.byKind[subFlap].flapUntil.Store(lastFault.UnixNano())
	c.subs.byKind[subDead].recoverAt.Store(min(c.subs.byKind[subDead].recoverAt.Load(), lastFault.UnixNano()))
	c.stopRevoker()
	sleepCtx(ctx, 5*time.Second) // load with no fault
	reports = stopLoad()
	loadEnd = time.Now()
	c.log.Info("load stopped; waiting for the system to quiesce", "accepted", len(c.load.keys()))
	return lastFault, loadEnd, reports
}

// removeGone checks that the subscription answered 410 was disabled, and
// removes it, which drops whatever waits for it, so every other group
// can drain.
func (c *campaign) removeGone(ctx context.Context) {
	gone := c.subs.byKind[subGone].id
	if out, err := cli(ctx, c.bin, c.cliEnv, "subscriptions", "get", gone, "--output", "json"); err != nil {
		c.finding("subscriptions get (gone): %v", err)
	} else {
		var s struct {
			Enabled bool `json:"enabled"`
		}
		if json.Unmarshal(out, &s) == nil && s.Enabled {
			c.finding("the subscription answered 410 is still enabled")
		}
	}
	if _, err := cli(ctx, c.bin, c.cliEnv, "subscriptions", "rm", gone); err != nil {
		c.finding("subscriptions rm (gone): %v", err)
	}
}

// quiesce polls the invariants until they hold or the profile's bound
// passes, and returns the last outcome and how long after the last fault
// they held (-1: not within the bound).
func (c *campaign) quiesce(ctx context.Context, lastFault time.Time) (outcome, time.Duration) {
	var (
		o        outcome
		err      error
		quiesced time.Duration
	)
	deadline := time.Now().Add(c.prof.quiesce)
	for {
		o, err = c.evaluate(ctx)
		if err == nil && len(o.failures()) == 0 {
			quiesced = time.Since(lastFault)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			quiesced = -1
			break
		}
		c.log.Info("not quiesced yet", "err", err, "failing", strings.Join(o.failures(), " | "))
		sleepCtx(ctx, 5*time.Second)
	}
	if err != nil {
		c.finding("checking the invariants: %v", err)
	}
	return o, quiesced
}

// checkAlive reports every process found dead at the end.
func (c *campaign) checkAlive() {
	for _, p := range c.procs {
		if !p.alive() {
			c.finding("%s was dead at the end; log %s", p.name, p.logPath)
		}
	}
}

// stopDeployment stops every process gracefully: a clean exit is part of
// the contract, and sum's findings name each that failed it.
func (c *campaign) stopDeployment(sum *summary) {
	for _, p := range c.procs {
		if _, err := p.stop(30 * time.Second); err != nil {
			sum.Findings = append(sum.Findings, "final stop: "+err.Error())
		}
	}
}

// writeSummary writes sum as JSON (to --out, or summary.json in the work
// directory) and prints it; a campaign that passed in a temporary work
// directory removes its data.
func (c *campaign) writeSummary(cfg config, sum *summary) error {
	path := cfg.out
	if path == "" {
		path = filepath.Join(c.work, "summary.json")
	}
	raw, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	sum.print(os.Stdout)
	fmt.Printf("campaign: JSON summary in %s\n", path)
	if sum.Passed && cfg.work == "" {
		_ = os.RemoveAll(filepath.Join(c.work, "data"))
		_ = os.RemoveAll(filepath.Join(c.work, "broker"))
	}
	return nil
}

// summary is the campaign's result, written as JSON and printed as text.
type summary struct {
	Seed     uint64 `json:"seed"`
	Profile  string `json:"profile"`
	Broker   string `json:"broker"`
	Command  string `json:"command"`
	Passed   bool   `json:"passed"`
	Work     string `json:"work_dir"`
	LoadSecs int    `json:"load_seconds"`

	Sent       int64            `json:"sent"`
	Status     map[string]int64 `json:"status"`
	Errors     int64            `json:"transport_errors"`
	Accepted   int              `json:"accepted_distinct"`
	Lost       int              `json:"lost"`
	Duplicated int              `json:"duplicated_on_events"`
	// DuplicateDeliveries is the at-least-once excess per subscriber
	// kind (over its subscribers).
	DuplicateDeliveries map[string]int `json:"duplicate_deliveries"`
	Delivered           map[string]int `json:"delivered_distinct"`
	// Subscriptions in the deployment, of every kind.
	Subscriptions int `json:"subscriptions"`
	// The pull client's answers read, answers dropped as if lost,
	// requests failed or refused, events it read more than once, and its
	// last failure.
	PullAnswers   int64  `json:"pull_answers"`
	PullDropped   int64  `json:"pull_dropped"`
	PullFailures  int64  `json:"pull_failures"`
	PullRepeated  int    `json:"pull_repeated"`
	PullLastError string `json:"pull_last_error,omitempty"`
	// The slow pullers' answers read and requests failed or refused
	// (503 at the pull budget among them), all of them.
	SlowPullAnswers   int64  `json:"slow_pull_answers"`
	SlowPullFailures  int64  `json:"slow_pull_failures"`
	SlowPullLastError string `json:"slow_pull_last_error,omitempty"`
	// Replays counts the replays of the processor's group and of a
	// subscription's (by the role that stopped for it).
	Replays map[string]int `json:"replays"`

	FaultsByKind   map[string]int    `json:"faults_by_kind"`
	RecoveryByKind map[string]string `json:"recovery_max_by_kind"`
	// RecoveryAfter is each kind's worst recovery after its injection
	// ended, bounded by RecoveryBound (invariant 7).
	RecoveryAfter map[string]string `json:"recovery_after_injection_max_by_kind"`
	RecoveryBound string            `json:"recovery_after_injection_bound"`
	Faults        []faultResult     `json:"faults"`
	RateNoFault   float64           `json:"accepted_per_second_outside_faults"`
	RateInFault   float64           `json:"accepted_per_second_during_faults"`
	// RateByKind is the accepted rate while faults of each kind ran,
	// injection to recovery.
	RateByKind    map[string]float64 `json:"accepted_per_second_by_kind"`
	QuiescedAfter string             `json:"quiesced_after_last_fault"`
	PeakRSSMiB    map[string]float64 `json:"peak_rss_mib"`
	// RSSBoundMiB is each role's memory bound (invariant 5).
	RSSBoundMiB map[string]float64 `json:"rss_bound_mib"`
	Outcome     outcome            `json:"invariants"`
	Findings    []string           `json:"findings"`
	Failures    []string           `json:"failures"`
}

func (c *campaign) summarize(cfg config, results []faultResult, reports []loadgen.Report, o outcome,
	loadStart, loadEnd, lastFault time.Time, quiesced time.Duration) *summary {
	s := &summary{
		Seed: c.seed, Profile: cfg.profName, Broker: c.broker.kind, Work: c.work,
		Command:  fmt.Sprintf("go run ./tools/campaign --profile %s --broker %s --seed %d%s", cfg.profName, c.broker.kind, c.seed, cfg.rateFlag),
		LoadSecs: int(loadEnd.Sub(loadStart).Seconds()),
		Accepted: o.Accepted, Lost: o.Lost, Duplicated: o.Duplicated, Outcome: o,
		DuplicateDeliveries: map[string]int{}, Delivered: map[string]int{},
		FaultsByKind: map[string]int{}, RecoveryByKind: map[string]string{}, RecoveryAfter: map[string]string{}, RecoveryBound: recoveryBound.String(), Faults: results,
		RateByKind: map[string]float64{}, PeakRSSMiB: map[string]float64{}, RSSBoundMiB: map[string]float64{}, Replays: c.replayCounts(),
	}
	for _, r := range reports {
		s.Sent += r.Sent
	}
	s.Status, s.Errors = c.load.snapshot()
	accepted := make(map[string]bool)
	for _, k := range c.load.keys() {
		accepted[k] = true
	}
	for _, sub := range c.subs.all() {
		d, e := sub.counts(func(id string) bool { return accepted[id] })
		s.Delivered[sub.kind] += d
		s.DuplicateDeliveries[sub.kind] += e
	}
	s.Subscriptions = len(c.subs.all()) + 2 // and the topic and pull ones
	s.PullAnswers, s.PullDropped, s.PullFailures, s.PullRepeated, s.PullLastError = c.puller.stats()
	for _, p := range c.slowPullers {
		answers, _, failures, _, last := p.stats()
		s.SlowPullAnswers += answers
		s.SlowPullFailures += failures
		s.SlowPullLastError = cmp.Or(last, s.SlowPullLastError)
	}
	worst, worstAfter := map[string]time.Duration{}, map[string]time.Duration{}
	kindTime := map[string]time.Duration{}
	var inFault time.Duration
	var inFaultAccepted float64
	for _, r := range results {
		s.FaultsByKind[r.Kind]++
		worst[r.Kind] = max(worst[r.Kind], r.Recovery)
		inFault += r.Recovery
		inFaultAccepted += r.Rate * r.Recovery.Seconds()
		kindTime[r.Kind] += r.Recovery
		s.RateByKind[r.Kind] += r.Rate * r.Recovery.Seconds()
		after := r.Recovery - r.Took
		worstAfter[r.Kind] = max(worstAfter[r.Kind], after)
		if after > recoveryBound {
			s.Failures = append(s.Failures, fmt.Sprintf("invariant 7: %s %s recovered %v after its injection ended, over the bound %v",
				r.Kind, r.Target, after.Round(100*time.Millisecond), recoveryBound))
		}
	}
	for k, d := range worst {
		s.RecoveryByKind[k] = d.Round(100 * time.Millisecond).String()
		s.RecoveryAfter[k] = worstAfter[k].Round(100 * time.Millisecond).String()
		if kindTime[k] > 0 {
			s.RateByKind[k] = float64(int(s.RateByKind[k]/kindTime[k].Seconds()*10)) / 10
		}
	}
	if inFault > 0 {
		s.RateInFault = inFaultAccepted / inFault.Seconds()
	}
	total := c.load.rate(loadStart, loadEnd) * loadEnd.Sub(loadStart).Seconds()
	if rest := loadEnd.Sub(loadStart) - inFault; rest > time.Second {
		s.RateNoFault = (total - inFaultAccepted) / rest.Seconds()
	}
	if quiesced >= 0 {
		s.QuiescedAfter = quiesced.Round(100 * time.Millisecond).String()
	} else {
		s.QuiescedAfter = "not within " + c.prof.quiesce.String()
	}
	for _, p := range c.procs {
		mib := float64(p.peakRSS()) / (1 << 20)
		s.PeakRSSMiB[p.name] = float64(int(mib*10)) / 10
		bound := rssBound[p.roles]
		s.RSSBoundMiB[p.roles] = float64(bound >> 20)
		if p.peakRSS() > bound {
			s.Failures = append(s.Failures, fmt.Sprintf("invariant 5: %s peaked at %.0f MiB, over the %s bound %d MiB", p.name, mib, p.roles, bound>>20))
		}
	}
	_ = lastFault
	s.Failures = append(s.Failures, o.failures()...)
	c.mu.Lock()
	s.Findings = append([]string{}, c.findings...)
	c.mu.Unlock()
	sort.Strings(s.Failures)
	// Invariants decide; findings (a slow shutdown, a slow recovery, an
	// unexpected answer) are reported for a human to judge.
	s.Passed = len(s.Failures) == 0
	return s
}

func (s *summary) print(w *os.File) {
	verdict := "PASSED"
	if !s.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\n==== hookstream fault campaign: %s (seed %d, profile %s, broker %s, %ds of load)\n", verdict, s.Seed, s.Profile, s.Broker, s.LoadSecs)
	fmt.Fprintf(w, "requests sent %d, answers %v, transport errors %d\n", s.Sent, s.Status, s.Errors)
	fmt.Fprintf(w, "events accepted (distinct) %d, lost %d, duplicated on events %d\n", s.Accepted, s.Lost, s.Duplicated)
	fmt.Fprintf(w, "throughput (2xx/s): %.1f outside faults, %.1f during faults; by kind %v\n", s.RateNoFault, s.RateInFault, s.RateByKind)
	kinds := make([]string, 0, len(s.Delivered))
	for k := range s.Delivered {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  subscriber %-8s delivered %6d distinct, %5d duplicate deliveries, %5d dead-lettered, %d missing\n",
			k, s.Delivered[k], s.DuplicateDeliveries[k], s.Outcome.DeadLettered[k], s.Outcome.Undelivered[k])
	}
	fmt.Fprintf(w, "  pull client: %d answers read, %d dropped as lost, %d requests failed, %d events read twice (last failure: %s)\n",
		s.PullAnswers, s.PullDropped, s.PullFailures, s.PullRepeated, s.PullLastError)
	fmt.Fprintf(w, "  %d slow pull clients (%d KiB/s each): %d answers read, %d requests failed or refused (last: %s)\n",
		slowPullers, slowPullRate>>10, s.SlowPullAnswers, s.SlowPullFailures, s.SlowPullLastError)
	fmt.Fprintf(w, "subscriptions: %d\n", s.Subscriptions)
	if p := s.Outcome.Pace; p.Windows > 0 {
		fmt.Fprintf(w, "pace beside a heavy filter (%d heavyexpr): healthy subscribers' accepted-to-delivered p99 %s over %d events (bound %s), %s outside\n",
			p.Windows, p.P99.Round(time.Millisecond), p.Events, p.Bound, p.Others.Round(time.Millisecond))
	}
	r := s.Outcome.Revocation
	fmt.Fprintf(w, "access tokens: %d revoked, %d requests with them (%d answered past %s, %d of those accepted), %d makings or revocations unanswered\n",
		r.Tokens, r.Probes, r.Tested, revocationBound, len(r.Late), r.Failed)
	fmt.Fprintf(w, "faults %d (recovery after each injection bounded by %s):", len(s.Faults), s.RecoveryBound)
	fk := make([]string, 0, len(s.FaultsByKind))
	for k := range s.FaultsByKind {
		fk = append(fk, k)
	}
	sort.Strings(fk)
	for _, k := range fk {
		fmt.Fprintf(w, " %s x%d (worst recovery %s, %s after the injection)", k, s.FaultsByKind[k], s.RecoveryByKind[k], s.RecoveryAfter[k])
	}
	fmt.Fprintln(w)
	for i, f := range s.Faults {
		fmt.Fprintf(w, "  %2d. +%-8s %-8s %-13s took %-8s recovered %-8s %.1f/s %s\n", i+1, f.At.Round(time.Second), f.Kind, f.Target,
			f.Took.Round(100*time.Millisecond), f.Recovery.Round(100*time.Millisecond), f.Rate, f.Error)
	}
	fmt.Fprintf(w, "quiesced (invariants 1-4, 6, 8 and 9 held) %s after the last fault\n", s.QuiescedAfter)
	fmt.Fprintf(w, "peak RSS MiB (bounds by role %v): %v\n", s.RSSBoundMiB, s.PeakRSSMiB)
	for _, f := range s.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	for _, f := range s.Findings {
		fmt.Fprintln(w, "FINDING:", f)
	}
	fmt.Fprintf(w, "reproduce: %s\n", s.Command)
}
