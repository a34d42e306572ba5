package topics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestFindEvent: the latest record of an event is found on the events
// topic, past many records of others; an unknown event is not found.
func TestFindEvent(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	cl := env.Client(t)
	c := topics.Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, Names: env.Names}
	ctx := context.Background()
	produce := func(recs ...*kgo.Record) {
		for _, r := range recs {
			r.Topic = string(env.Names.Events)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(&kgo.Record{Key: []byte("github:1"), Value: []byte(`{"n":1}`)})
	var others []*kgo.Record
	for i := range 3000 {
		others = append(others, &kgo.Record{Key: fmt.Appendf(nil, "shop:%d", i), Value: []byte(`{}`)})
	}
	produce(others...)
	produce(&kgo.Record{Key: []byte("github:1"), Value: []byte(`{"n":2}`)})
	produce(others[:500]...)

	r, err := c.FindEvent(ctx, "github:1")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Value) != `{"n":2}` {
		t.Errorf("found %s, want the latest record of github:1", r.Value)
	}
	if _, err := c.FindEvent(ctx, "github:404"); !errors.Is(err, topics.ErrEventNotFound) {
		t.Errorf("unknown event: got %v, want ErrEventNotFound", err)
	}
}
