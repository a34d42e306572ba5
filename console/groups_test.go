package console_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// transact writes n transactions of k records of size random bytes to
// partition of topic, as the processor writes, and waits until the last
// stable offset is past them.
func transact(t *testing.T, env *kafkatest.Env, topic string, partition int32, n, k, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txn := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(fmt.Sprintf("%s-test-txn-%d", env.Names.Prefix, partition)))
	for i := range n {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		for j := range k {
			value := make([]byte, size)
			rand.Read(value)
			if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: partition, Key: fmt.Appendf(nil, "t%d-%d", i, j), Value: value}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	want := int64(n * (k + 1))
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		listed, err := env.Admin(t).ListCommittedOffsets(ctx, topic)
		if err != nil {
			return err
		}
		if o, _ := listed.Lookup(topic, partition); o.Offset != want {
			return fmt.Errorf("last stable offset %d, want %d", o.Offset, want)
		}
		return nil
	})
}

var tags = regexp.MustCompile(`<[^>]*>`)

// text is what a reader sees of some HTML: its text, spaces collapsed.
func text(h string) string {
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(h, " "))), " ")
}

// TestGroupsPageFoldsPartitions: the groups page shows each group on one
// line, its lag in events (in offsets, as an upper bound, past what is
// read to count), and its partitions folded under it.
func TestGroupsPageFoldsPartitions(t *testing.T) {
	t.Parallel()
	h := serve(t, options{token: token})
	names := h.env.Names
	ingest, group := string(names.Ingest), string(names.ProcessorGroup())
	transact(t, h.env, ingest, 0, 5, 3, 100)     // records 0-2 marker 3, ..., 16-18 marker 19
	transact(t, h.env, ingest, 1, 24, 1, 60<<10) // 1.4 MiB: past what lag reads to count
	var at kadm.Offsets
	at.Add(kadm.Offset{Topic: ingest, Partition: 0, At: 11, LeaderEpoch: -1})
	at.Add(kadm.Offset{Topic: ingest, Partition: 1, At: 46, LeaderEpoch: -1}) // the last record (46), its marker at 47
	if err := h.env.Admin(t).CommitAllOffsets(context.Background(), group, at); err != nil {
		t.Fatalf("commit: %v", err)
	}
	b := h.browser(t)
	b.signIn()
	page := b.get("/ui/groups")
	if page.status != http.StatusOK {
		t.Fatalf("GET /ui/groups: %d %s", page.status, page.body)
	}
	fold := regexp.MustCompile(`(?s)<details([^>]*)>\s*<summary>(.*?)</summary>(.*?)</details>`)
	folds := fold.FindAllStringSubmatch(page.body, -1)
	var processor []string
	for _, f := range folds {
		if strings.Contains(f[2], group) {
			processor = f
		}
	}
	if processor == nil {
		t.Fatalf("groups page: no folded line for %s in\n%s", group, page.body)
	}
	if strings.Contains(processor[1], "open") {
		t.Errorf("the processor's partitions are open; want them folded")
	}
	if got, want := text(processor[2]), group+" · Empty · 0 members · lag 7 events · Plan a replay of processor"; got != want {
		t.Errorf("the processor's line: got %q, want %q", got, want)
	}
	inside := text(processor[3])
	for _, want := range []string{ingest + " 0 11 20 6 none", ingest + " 1 46 48 1 none"} {
		if !strings.Contains(inside, want) {
			t.Errorf("the processor's partitions: got %q, want a row %q", inside, want)
		}
	}

	// Further behind than the page reads to count: offsets, an upper bound.
	at = kadm.Offsets{}
	at.Add(kadm.Offset{Topic: ingest, Partition: 1, At: 0, LeaderEpoch: -1})
	if err := h.env.Admin(t).CommitAllOffsets(context.Background(), group, at); err != nil {
		t.Fatalf("commit: %v", err)
	}
	page = b.get("/ui/groups")
	for _, f := range fold.FindAllStringSubmatch(page.body, -1) {
		if strings.Contains(f[2], group) {
			if got, want := text(f[2]), group+" · Empty · 0 members · lag ≤ 54 offsets · Plan a replay of processor"; got != want {
				t.Errorf("the processor's line past the bound: got %q, want %q", got, want)
			}
			if inside := text(f[3]); !strings.Contains(inside, ingest+" 1 0 48 ≤ 48 offsets none") {
				t.Errorf("the processor's partitions past the bound: got %q, want partition 1 at ≤ 48 offsets", inside)
			}
		}
	}
}
