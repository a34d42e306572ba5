package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/topics"
)

// TestWithinSelectsTheLettersShown: a filter Within the offsets a listing
// read selects only letters there, sees the redrive markers written after
// them, and redrives only those letters, not the ones written since.
//
//	partition 0: 0 shop:a, 1 shop:b, 2 shop:c
//	partition 1: 0 shop:d, 1 shop:e
func TestWithinSelectsTheLettersShown(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 2)
	names := fx.env.Names
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	letter := func(p int32, key string) *kgo.Record {
		r := processorLetter(names, p, key, t0)
		r.Key = []byte(key)
		return r
	}
	fx.produce(t, letter(0, "shop:a"), letter(0, "shop:b"), letter(0, "shop:c"), letter(1, "shop:d"), letter(1, "shop:e"))
	within := topics.Ranges{0: {From: 1, To: 3}, 1: {From: 1, To: 2}}

	if got := keys(fx.list(t, deadletter.Processor, deadletter.Filter{Within: within})); !slices.Equal(got, []string{"shop:b", "shop:c", "shop:e"}) {
		t.Errorf("List Within %v: got %v, want shop:b, shop:c, shop:e", within, got)
	}
	if got := keys(fx.list(t, deadletter.Processor, deadletter.Filter{Within: topics.Ranges{}})); len(got) != 0 {
		t.Errorf("List Within no range: got %v, want none", got)
	}
	if got := keys(fx.list(t, deadletter.Processor, deadletter.Filter{Within: topics.Ranges{1: {From: 0, To: 2}}, Key: "shop:e"})); !slices.Equal(got, []string{"shop:e"}) {
		t.Errorf("List Within partition 1 and key shop:e: got %v, want shop:e", got)
	}

	// shop:c is redriven (its marker lands after the range), and a new
	// letter comes: the redrive Within the listing skips the one and
	// leaves the other.
	if copied, _ := fx.redrive(t, deadletter.Processor, deadletter.Filter{Key: "shop:c"}); copied != 1 {
		t.Fatalf("Redrive shop:c: %d copied, want 1", copied)
	}
	fx.produce(t, letter(0, "shop:f"))
	var redriven []string
	for _, l := range fx.list(t, deadletter.Processor, deadletter.Filter{Within: within}) {
		if l.Redriven {
			redriven = append(redriven, l.Key)
		}
	}
	if !slices.Equal(redriven, []string{"shop:c"}) {
		t.Errorf("List Within after redriving shop:c: got %v redriven, want shop:c", redriven)
	}
	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{Within: within}); copied != 2 || skipped != 1 {
		t.Errorf("Redrive Within %v: got %d copied, %d skipped; want 2 (shop:b, shop:e) and 1 (shop:c)", within, copied, skipped)
	}
	if got := countKeys(t, fx.env, names.Ingest); fmt.Sprint(got) != "map[shop:b:1 shop:c:1 shop:e:1]" {
		t.Errorf("%s: got %v, want shop:b, shop:c and shop:e once each, and not shop:f", names.Ingest, got)
	}
}

// TestWithinRefusesWhenTheDLQMovedOn: a filter Within offsets that the
// DLQ's end has left more than deadletter.MaxPastWithin behind (the DLQ
// grew after the listing, or the offsets are old) is refused with
// ErrChanged, by List and Redrive alike, before anything is copied; at
// the bound it is read.
func TestWithinRefusesWhenTheDLQMovedOn(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 1)
	names := fx.env.Names
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	recs := make([]*kgo.Record, 2+deadletter.MaxPastWithin)
	for i := range recs {
		recs[i] = processorLetter(names, 0, fmt.Sprint(i), t0)
	}
	fx.produce(t, recs...) // offsets 0 to MaxPastWithin+1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The end is MaxPastWithin past offset 2: read.
	if got := keys(fx.list(t, deadletter.Processor, deadletter.Filter{Within: topics.Ranges{0: {From: 1, To: 2}}})); !slices.Equal(got, []string{"shop:1"}) {
		t.Errorf("List Within 1-2: got %v, want shop:1", got)
	}
	// One more past offset 1: refused.
	moved := deadletter.Filter{Within: topics.Ranges{0: {From: 0, To: 1}}}
	if _, err := deadletter.New(fx.cluster(names)).List(ctx, deadletter.Processor, moved); !errors.Is(err, deadletter.ErrChanged) {
		t.Errorf("List Within 0-1: got %v, want ErrChanged", err)
	}
	if _, _, err := deadletter.New(fx.cluster(names)).Redrive(ctx, deadletter.Processor, moved); !errors.Is(err, deadletter.ErrChanged) {
		t.Errorf("Redrive Within 0-1: got %v, want ErrChanged", err)
	}
	if got := countKeys(t, fx.env, names.Ingest); len(got) != 0 {
		t.Errorf("%s after the refused redrive: got %v, want nothing", names.Ingest, got)
	}
}
