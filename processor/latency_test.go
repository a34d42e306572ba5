package processor

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// TestSessionRetriesConcurrentTransactionsQuickly: a produce Kafka 4
// answers CONCURRENT_TRANSACTIONS (the last transaction's markers are
// still being written) is retried after the session client's next
// metadata update; that comes within tens of milliseconds, not kgo's
// default 5s, which held one transaction in a few for seconds on a
// cluster.
func TestSessionRetriesConcurrentTransactionsQuickly(t *testing.T) {
	p := New(Config{Names: topics.NewNames("t"), TransactionalID: "t-processor-x", MaxRecordBytes: 1 << 20}, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	cl, err := kgo.NewClient(p.clientOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.MetadataMinAge).(time.Duration); got > 50*time.Millisecond {
		t.Errorf("session client's metadata min age: got %v, want at most 50ms", got)
	}
}

// TestTransactionRecordsGoAtTheFlush: a transaction's records are sent
// together when it flushes, not as they are produced.
func TestTransactionRecordsGoAtTheFlush(t *testing.T) {
	p := New(Config{Names: topics.NewNames("t"), TransactionalID: "t-processor-x", MaxRecordBytes: 1 << 20}, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	cl, err := kgo.NewClient(p.clientOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.ProducerLinger).(time.Duration); got < 50*time.Millisecond {
		t.Errorf("session client's linger: got %v, want at least 50ms (the flush sends)", got)
	}
}
