package topics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Instrument names a long-lived client and exports its kprom metrics
// (hookstream_* with a client_id label) to reg. A kprom collector serves
// one client, so each client gets its own; short-lived clients (restores,
// commands) go without.
func Instrument(reg prometheus.Registerer, clientID string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(clientID),
		kgo.WithHooks(kprom.NewMetrics("hookstream", kprom.Registerer(reg), kprom.WithClientLabel())),
	}
}
