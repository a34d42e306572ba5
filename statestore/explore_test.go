package statestore

import (
	"testing"
	"math/rand/v2"
	"time"
)

func TestExploreGet(t *testing.T) {
	for _, cache := range []int64{8 << 20, 64 << 20} {
	const n = 200_000
	s, err := Open(t.TempDir(), 0, Options{CacheSize: cache})
	if err != nil { t.Fatal(err) }
	keys := benchKeys(0, n)
	for i := 0; i < n; i += benchBatch {
		changes := make([]Change, benchBatch)
		for j := range changes {
			changes[j] = Change{Key: keys[i+j], State: st(Done, int64(i+j), t1)}
		}
		if err := s.Apply(changes, int64(i+benchBatch)); err != nil { t.Fatal(err) }
	}
	s.db.Flush()
	time.Sleep(2*time.Second)
	misses := benchKeys(n, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ks := range [][][]byte{keys, misses} {
		start := time.Now()
		for i := 0; i < 200000; i++ { s.Get(ks[rng.IntN(n)]) }
		t.Logf("cache %d: %v per get", cache>>20, time.Since(start)/200000)
	}
	t.Log(s.db.Metrics().String())
	s.Close()
	}
}
