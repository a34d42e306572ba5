package topics

import (
	"net"
	"slices"
	"strconv"
	"strings"

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

// Partitioner puts the records of the keyed topics where their keys hash,
// as every hookstream producer's default partitioner does (PartitionOf),
// and every other record in the partition it names.
func Partitioner(keyed ...Topic) kgo.Partitioner {
	hash := kgo.StickyKeyPartitioner(nil)
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		if slices.Contains(keyed, Topic(topic)) {
			return hash.ForTopic(topic).Partition
		}
		return func(r *kgo.Record, _ int) int { return int(r.Partition) }
	})
}

// RoleProcessor is the processor's role in its group members' client ids
// (MemberClientID): how a story query finds the member that owns a
// partition of the ingest topic.
const RoleProcessor = "processor"

// memberClientIDPrefix starts the client id of every group member a
// hookstream instance runs.
const memberClientIDPrefix = "hookstream-"

// MemberClientID is the client id of the group members an instance runs
// for role (processor, dispatcher), advertising its admin listener at
// adminAddr (host:port): hookstream-<role>@<adminAddr>, or
// hookstream-<role> without one. A group's description shows it beside
// each member: how instances find each other's admin listener, and
// operators which instance holds what.
func MemberClientID(role, adminAddr string) string {
	if adminAddr == "" {
		return memberClientIDPrefix + role
	}
	return memberClientIDPrefix + role + "@" + adminAddr
}

// MemberHost is the host of a group member's client host as a group's
// description gives it: "/10.0.0.5" (Apache Kafka) or "10.0.0.5:51234"
// (kfake) are 10.0.0.5.
func MemberHost(clientHost string) string {
	host := strings.TrimPrefix(clientHost, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// MemberAdminAddr reads a MemberClientID: the member's role and the admin
// listener it advertises, a listener on every interface (":8081",
// "0.0.0.0:8081") being reached at the member's host as the broker saw it
// (clientHost, "/10.0.0.5"). ok is false for a client id that advertises
// no address, or no host:port.
func MemberAdminAddr(clientID, clientHost string) (role, addr string, ok bool) {
	rest, found := strings.CutPrefix(clientID, memberClientIDPrefix)
	if !found {
		return "", "", false
	}
	role, addr, found = strings.Cut(rest, "@")
	if !found || role == "" {
		return "", "", false
	}
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
		return "", "", false
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = MemberHost(clientHost)
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("/?#@[]\\", r)
	}) {
		return "", "", false
	}
	return role, net.JoinHostPort(host, port), true
}
