// Package kafkatest gives tests a real Kafka-protocol broker: an in-process
// kfake cluster, or the Apache Kafka cluster named by HOOKSTREAM_TEST_BROKERS.
// Each test gets its own topic prefix, so tests share a cluster safely.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// BrokersEnv names the variable that points tests at a real cluster.
const BrokersEnv = "HOOKSTREAM_TEST_BROKERS"

// Env is one test's broker and topic names.
type Env struct {
	Seeds []string
	Names topics.Names
	// Cluster is the in-process broker, nil on a real cluster.
	Cluster *kfake.Cluster
}

// New returns a broker with hookstream's topics created under a fresh
// prefix, with maxBody as the body limit of their specs.
func New(t testing.TB, partitions int32, maxBody int64) *Env {
	t.Helper()
	e := &Env{Names: topics.NewNames(uniquePrefix(t))}
	if brokers := os.Getenv(BrokersEnv); brokers != "" {
		e.Seeds = strings.Split(brokers, ",")
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		t.Cleanup(c.Close)
		e.Cluster = c
		e.Seeds = c.ListenAddrs()
	}
	e.Ensure(t, partitions, maxBody)
	return e
}

// Ensure creates the topics of e.Names, replicated as the cluster's size
// allows (at most 3 replicas), as hookstream does by default.
func (e *Env) Ensure(t testing.TB, partitions int32, maxBody int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topics.Ensure(ctx, e.Client(t), topics.Specs(e.Names, partitions, maxBody), 0); err != nil {
		t.Fatalf("ensure topics: %v", err)
	}
}

// Real reports whether the tests run on a real cluster.
func Real() bool { return os.Getenv(BrokersEnv) != "" }

// Client returns a client on the test's broker, closed at cleanup.
func (e *Env) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.Seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ClusterOf is the test's broker as a component reaches it through cl:
// the broker's seeds, then opts, build the component's own clients, and
// the names are the test's.
func (e *Env) ClusterOf(cl *kgo.Client, opts ...kgo.Opt) topics.Cluster {
	return topics.Cluster{Client: cl, Opts: append([]kgo.Opt{kgo.SeedBrokers(e.Seeds...)}, opts...), Names: e.Names}
}

// Admin returns an admin client on the test's broker.
func (e *Env) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(e.Client(t))
}

// Records reads every committed record of topic up to its current end.
// Its clients are closed before it returns, so it can be polled. Every
// record of the events topic must be an envelope as schemas/envelope.json
// describes it (see CheckEnvelope): each test that reads events checks the
// schema against what the code writes.
func (e *Env) Records(t testing.TB, topic topics.Topic) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.Seeds...),
		kgo.ConsumeTopics(string(topic)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transactional partitions end in a commit marker: seeing the
		// markers is how a reader knows it reached the end.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, string(topic))
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: still waiting for partitions %v: %v", topic, want, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if !r.Attrs.IsControl() {
				if topic == e.Names.Events {
					CheckEnvelope(t, r)
				}
				out = append(out, r)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// WaitCommitted waits until group has committed every record of topic
// that exists when it is called. A transaction's commit marker follows its
// last record and is never committed past by a consumer that saw no record
// after it, so the target is the offset after the last record, not the
// end offset.
func (e *Env) WaitCommitted(t testing.TB, group topics.Group, topic topics.Topic) {
	t.Helper()
	want := make(map[int32]int64)
	for _, r := range e.Records(t, topic) {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	adm := e.Admin(t)
	WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		committed, err := adm.FetchOffsets(ctx, string(group))
		if err != nil {
			return err
		}
		for p, next := range want {
			if c, ok := committed.Lookup(string(topic), p); !ok || c.At < next {
				return fmt.Errorf("group %s: partition %d committed %d, want %d", group, p, c.At, next)
			}
		}
		return nil
	})
}

// WaitStable waits until every transaction on topic is settled: its last
// stable offset is its end on every partition. Kafka answers EndTxn
// before the coordinator has written the commit markers, so a
// read_committed reader may not see a just-committed transaction yet.
func (e *Env) WaitStable(t testing.TB, topic topics.Topic) {
	t.Helper()
	adm := e.Admin(t)
	WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, string(topic))
		if err != nil {
			return err
		}
		stable, err := adm.ListCommittedOffsets(ctx, string(topic))
		if err != nil {
			return err
		}
		var open error
		ends.Each(func(o kadm.ListedOffset) {
			if s, _ := stable.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
				open = fmt.Errorf("%s/%d: last stable offset %d, end %d", o.Topic, o.Partition, s.Offset, o.Offset)
			}
		})
		return open
	})
}

// Transact writes n transactions of k records of size random
// (incompressible) bytes each to partition of topic, as the processor
// writes: each transaction ends with a commit marker taking an offset, so
// the partition grows by n×(k+1) offsets for n×k records. It waits until
// they are settled (WaitStable).
func (e *Env) Transact(t testing.TB, topic topics.Topic, partition int32, n, k, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txn := e.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(int32(2*size+1024)),
		kgo.TransactionalID(fmt.Sprintf("%s-test-txn-%s-%d", e.Names.Prefix, topic, partition)))
	for i := range n {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		for j := range k {
			value := make([]byte, size)
			rand.Read(value)
			r := &kgo.Record{Topic: string(topic), Partition: partition, Key: fmt.Appendf(nil, "t%d-%d", i, j), Value: value}
			if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	e.WaitStable(t, topic)
}

// ReplayProcessor resets the processor group, stopped, to the start of
// the ingest topic, as `hookstream replay --group processor --to-earliest`.
func (e *Env) ReplayProcessor(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := e.Admin(t)
	starts, err := adm.ListStartOffsets(ctx, string(e.Names.Ingest))
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CommitAllOffsets(ctx, string(e.Names.ProcessorGroup()), starts.Offsets()); err != nil {
		t.Fatalf("reset offsets: %v", err)
	}
}

// WaitFor polls check until it returns nil or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logger returns a logger that writes to the test log, at warn level or at
// the level HOOKSTREAM_TEST_LOG names (debug, info).
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("HOOKSTREAM_TEST_LOG"))) // unset or unknown: warn
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func uniquePrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t-%s-%s", name, hex.EncodeToString(b[:]))
}

// FreeAddr returns a loopback address nothing listens on, for a server a
// test starts later (a process, or a broker it restarts on the same port).
// Ports come from below Linux's ephemeral range (32768 and up), so the
// outgoing connections of parallel tests cannot take one between this
// check and the server's bind, and none is handed out twice.
func FreeAddr(t testing.TB) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + mrand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// Embedded starts the embedded broker with persistence, as `hookstream
// run` does, on a free address with hookstream's topics under prefix.
func Embedded(t testing.TB, prefix string, partitions int32, maxBody int64) *Env {
	t.Helper()
	addr := FreeAddr(t)
	broker, err := topics.StartEmbedded(t.TempDir(), addr, Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	e := &Env{Seeds: []string{addr}, Names: topics.NewNames(prefix), Cluster: broker.Cluster()}
	e.Ensure(t, partitions, maxBody)
	return e
}

// Plug carries the broker connections of one simulated process. Pull is
// that process's kill -9 as the broker sees it: every connection dialed
// through the plug closes, and no new one opens, while the process's
// goroutines go on unaware.
type Plug struct {
	mu     sync.Mutex
	pulled bool
	conns  []net.Conn
}

// Dial is the client option that dials through the plug.
func (p *Plug) Dial() kgo.Opt {
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pulled {
			c.Close()
			return nil, errors.New("kafkatest: plug pulled")
		}
		p.conns = append(p.conns, c)
		return c, nil
	})
}

// Pull closes every connection of the plug and refuses new ones.
func (p *Plug) Pull() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pulled = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// IngestRecord is a record as the receiver writes it, with one provider
// header (x-shop).
func IngestRecord(names topics.Names, source, id, body string) *kgo.Record {
	ir := &topics.IngestRecord{
		Source:      source,
		EventID:     id,
		EventType:   "order.created",
		ReceivedAt:  time.Now(),
		ContentType: "application/json",
		Provider:    []kgo.RecordHeader{{Key: topics.ProviderHeaderKey("x-shop"), Value: []byte("s1")}},
		Body:        []byte(body),
	}
	return ir.Record(names.Ingest)
}

// Headers maps a record's headers by key; of a key written twice the last
// counts.
func Headers(r *kgo.Record) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}
