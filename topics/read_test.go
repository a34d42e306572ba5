package topics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRead reads spans of a topic whose partition 0 holds a0..a9, written
// a minute apart from t0, and partition 1 holds b0 and b1, then x0 and x1
// of an aborted transaction, then c0 of a committed one: by offsets, by
// time, within First or Last, of a key's partition, stopped by fn, and
// always read_committed, with progress reaching the offsets spanned.
func TestRead(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "read"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rc := Cluster{Client: cl, Opts: opts}
	tx, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("read-test"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	produce := func(cl *kgo.Client, p int32, values ...string) {
		t.Helper()
		for _, v := range values {
			r := &kgo.Record{Topic: "read", Partition: p, Key: []byte(v), Value: []byte(v)}
			if p == 0 {
				var i int
				fmt.Sscanf(v, "a%d", &i)
				r.Timestamp = t0.Add(time.Duration(i) * time.Minute)
			}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	transact := func(commit kgo.TransactionEndTry, values ...string) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(tx, 1, values...)
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	produce(cl, 0, "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9")
	produce(cl, 1, "b0", "b1")
	transact(kgo.TryAbort, "x0", "x1")
	transact(kgo.TryCommit, "c0")
	key := []byte("k")
	for i := 0; PartitionOf(key, 2) != 0; i++ {
		key = fmt.Appendf(nil, "k%d", i)
	}

	all := []string{"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "c0"}
	for _, tc := range []struct {
		name string
		span Span
		stop int // fn returns false after this many records; 0 never
		want []string
	}{
		{"everything, committed only", Span{}, 0, all},
		{"offsets", Span{From: Offset(3), To: Offset(6)}, 0, []string{"a3", "a4", "a5", "c0"}},
		{"offsets past the ends", Span{From: Offset(-5), To: Offset(100)}, 0, all},
		{"one partition", Span{Partitions: []int32{1}}, 0, []string{"b0", "b1", "c0"}},
		{"time", Span{From: At(t0.Add(2 * time.Minute)), To: At(t0.Add(5 * time.Minute)), Partitions: []int32{0}}, 0, []string{"a2", "a3", "a4"}},
		{"time to the end", Span{From: At(t0.Add(90 * time.Second)), Partitions: []int32{0}}, 0, all[2:10]},
		{"the zero time is the start", Span{From: At(time.Time{}), Partitions: []int32{0}}, 0, all[:10]},
		{"first", Span{Partitions: []int32{0}, First: 3}, 0, []string{"a0", "a1", "a2"}},
		{"last", Span{From: Offset(2), Partitions: []int32{0}, Last: 2}, 0, []string{"a8", "a9"}},
		{"last of a short range", Span{From: Offset(7), Partitions: []int32{0}, Last: 5}, 0, []string{"a7", "a8", "a9"}},
		{"a key's partition", Span{Key: key}, 0, all[:10]},
		{"fn stops", Span{Partitions: []int32{0}}, 4, []string{"a0", "a1", "a2", "a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var reads, totals []int64
			err := rc.Read(ctx, "read", tc.span, func(r *kgo.Record) bool {
				got = append(got, string(r.Value))
				return tc.stop == 0 || len(got) < tc.stop
			}, func(read, total int64) {
				reads, totals = append(reads, read), append(totals, total)
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
			rs, err := tc.span.Ranges(ctx, cl, "read")
			if err != nil {
				t.Fatal(err)
			}
			if len(reads) == 0 {
				t.Fatal("progress never called")
			}
			if !slices.IsSorted(reads) {
				t.Errorf("progress went back: %v", reads)
			}
			for _, total := range totals {
				if total != rs.Offsets() {
					t.Errorf("progress total %d, want %d", total, rs.Offsets())
				}
			}
			// Records read count control records; a read_committed
			// reader never sees the aborted x0 and x1, at 1/2 and 1/3.
			want := rs.Offsets()
			for _, o := range []int64{2, 3} {
				if r, ok := rs[1]; ok && r.From <= o && o < r.To {
					want--
				}
			}
			if last := reads[len(reads)-1]; tc.stop == 0 && last != want {
				t.Errorf("progress ended at %d records read, want %d", last, want)
			}
		})
	}

	t.Run("no such partition", func(t *testing.T) {
		err := rc.Read(ctx, "read", Span{Partitions: []int32{0, 7}}, func(*kgo.Record) bool { return true }, nil)
		if e, ok := errors.AsType[*NoPartitionError](err); !ok || e.Partition != 7 {
			t.Errorf("got %v, want partition 7 missing", err)
		}
	})

	t.Run("stable skips an open transaction", func(t *testing.T) {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(tx, 1, "open")
		defer func() {
			if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Error(err)
			}
		}()
		var got []string
		readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := rc.Read(readCtx, "read", Span{Partitions: []int32{1}, Stable: true}, func(r *kgo.Record) bool {
			got = append(got, string(r.Value))
			return true
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"b0", "b1", "c0"}; !slices.Equal(got, want) {
			t.Errorf("read %v, want %v", got, want)
		}
	})
}
