package topics

import (
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is how a component reaches hookstream's Kafka cluster: the
// shared client for requests (metadata, admin, produce), the options
// every client of its own starts from (seeds, TLS, SASL, logging), and
// the names of hookstream's topics and groups. The three travel together.
type Cluster struct {
	Client *kgo.Client
	Opts   []kgo.Opt
	Names  Names
}

// NewClient opens a client of the cluster's options, then extra; its
// caller closes it.
func (c Cluster) NewClient(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(slices.Concat(c.Opts, extra)...)
}

// Admin is an admin client over the shared client.
func (c Cluster) Admin() *kadm.Client { return kadm.NewClient(c.Client) }

// Fenced reports whether a transactional write failed because a later
// writer under the same transactional id fenced it: the read-modify-writes
// of the subscriptions and access topics lost their race and may be tried
// again on the new state.
func Fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionAbortable) || errors.Is(err, kerr.ConcurrentTransactions) ||
		errors.Is(err, kerr.InvalidTxnState)
}
