// Package instances lists the hookstream processes of a deployment as the
// Kafka groups know them, and how ready each is. Processors are the
// members of <prefix>-processor, dispatchers those of <prefix>-retry
// (every dispatcher runs the retry consumer); each advertises its admin
// listener in its client id (topics.MemberClientID), which groups a
// process's members into one instance and is where its /readyz is asked.
//
// It is honest about what it cannot see: an instance that runs only the
// ingest role joins no group and is not listed (but for the instance
// asking); one that advertises no admin address, or does not answer, is of
// unknown readiness. It is bounded: at most MaxInstances are listed, each
// asked once, at most probeConcurrency at a time, for at most
// ProbeTimeout, reading at most maxProbeAnswer bytes and following no
// redirect. It owns no state.
package instances

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Bounds of a listing.
const (
	// MaxInstances is the most instances listed; the others are counted.
	MaxInstances = 64
	// ProbeTimeout bounds asking one instance's /readyz.
	ProbeTimeout = 2 * time.Second
	// probeConcurrency bounds the instances asked at once.
	probeConcurrency = 8
	// maxProbeAnswer bounds the answer read from an instance.
	maxProbeAnswer = 64 << 10
)

// Readiness of an instance.
const (
	Ready    = "ready"
	NotReady = "not_ready"
	Unknown  = "unknown"
)

// Roles as the groups show them.
const (
	roleProcessor  = "processor"
	roleDispatcher = "dispatcher"
)

// Instance is one hookstream process of the deployment.
type Instance struct {
	// AdminAddr is the admin listener it advertises (host:port), empty
	// when it advertises none.
	AdminAddr string `json:"admin_addr,omitempty"`
	// Host is where the broker sees it connect from.
	Host string `json:"host,omitempty"`
	// Self is the instance answering.
	Self bool `json:"self,omitempty"`
	// Roles are its roles: as its /readyz says when it answered (the
	// ingest role included), else as its group memberships show.
	Roles []string `json:"roles"`
	// Members are its members of the processor and retry groups.
	Members []Member `json:"members"`
	// Readiness is ready, not_ready or unknown; Checks each check's
	// readiness when it answered, Detail why it is not ready or unknown.
	Readiness string          `json:"readiness"`
	Checks    map[string]bool `json:"checks,omitempty"`
	Detail    string          `json:"detail,omitempty"`
}

// Member is one member of a group.
type Member struct {
	Group string `json:"group"`
	// ID is its static instance id, or its member id.
	ID         string `json:"id"`
	ClientID   string `json:"client_id"`
	Partitions int    `json:"partitions"`
}

// List is the deployment's instances.
type List struct {
	// Instances are the instance asking first, then by admin address and
	// host.
	Instances []Instance `json:"instances"`
	// Omitted counts the instances past MaxInstances.
	Omitted int `json:"omitted"`
}

// Self is the instance asking.
type Self struct {
	// AdminAddr is the admin address it advertises (its advertised
	// address, else its listener).
	AdminAddr string
	// Readiness reads its readiness, as its /readyz answers it.
	Readiness func(context.Context) admin.Readiness
}

// Service lists the instances of a cluster's deployment: what the admin
// API (Mount), the console's overview and hookstream instances call.
type Service struct {
	c topics.Cluster
}

// New is the service of c's instances. It does no I/O.
func New(c topics.Cluster) *Service { return &Service{c: c} }

// Discover lists the instances of the deployment from the members of the
// processor and retry groups and asks each for its readiness at the admin
// address it advertises; self, when not nil, is the instance asking: it is
// listed whatever its roles, and its readiness read in process.
func (s *Service) Discover(ctx context.Context, self *Self) (List, error) {
	names := s.c.Names
	groups := []string{string(names.ProcessorGroup()), string(names.RetryGroup())}
	described, err := s.c.Admin().DescribeGroups(ctx, groups...)
	if err != nil {
		return List{}, fmt.Errorf("instances: describe %s: %w", strings.Join(groups, ", "), err)
	}
	byKey := make(map[string]*Instance)
	var order []string
	for _, g := range groups {
		d, ok := described[g]
		if !ok || d.Err != nil {
			continue // a group that does not exist has no members
		}
		for _, m := range d.Members {
			in, key := instanceOf(m, self)
			if prev, ok := byKey[key]; ok {
				in = prev
			} else {
				byKey[key] = in
				order = append(order, key)
			}
			role := roleDispatcher
			if g == string(names.ProcessorGroup()) {
				role = roleProcessor
			}
			if !slices.Contains(in.Roles, role) {
				in.Roles = append(in.Roles, role)
			}
			in.Members = append(in.Members, memberOf(g, m))
		}
	}
	out := List{}
	selfFound := false
	for _, key := range order {
		selfFound = selfFound || byKey[key].Self
	}
	if self != nil && !selfFound {
		byKey["self"] = &Instance{AdminAddr: self.AdminAddr, Self: true}
		order = append(order, "self")
	}
	for _, key := range order {
		out.Instances = append(out.Instances, *byKey[key])
	}
	slices.SortFunc(out.Instances, func(a, b Instance) int {
		if a.Self != b.Self {
			if a.Self {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.AdminAddr, b.AdminAddr), cmp.Compare(a.Host, b.Host), cmp.Compare(firstID(a), firstID(b)))
	})
	if n := len(out.Instances); n > MaxInstances {
		out.Omitted = n - MaxInstances
		out.Instances = out.Instances[:MaxInstances]
	}
	readiness(ctx, out.Instances, self)
	for i := range out.Instances {
		in := &out.Instances[i]
		slices.Sort(in.Roles)
		if in.Roles == nil {
			in.Roles = []string{}
		}
		if in.Members == nil {
			in.Members = []Member{}
		}
	}
	return out, nil
}

func firstID(in Instance) string {
	if len(in.Members) == 0 {
		return ""
	}
	return in.Members[0].ID
}

// instanceOf is the instance a group member belongs to, and its key: the
// admin address the member advertises and its host (processes on several
// hosts may advertise one loopback address), or the member alone when it
// advertises none.
func instanceOf(m kadm.DescribedGroupMember, self *Self) (*Instance, string) {
	host := topics.MemberHost(m.ClientHost)
	in := &Instance{Host: host}
	raw := ""
	if _, addr, ok := topics.MemberAdminAddr(m.ClientID, m.ClientHost); ok {
		in.AdminAddr = addr
		_, raw, _ = strings.Cut(m.ClientID, "@")
	}
	if in.AdminAddr == "" {
		return in, "member\x00" + m.MemberID
	}
	in.Self = self != nil && raw == self.AdminAddr
	return in, "addr\x00" + in.AdminAddr + "\x00" + host
}

func memberOf(group string, m kadm.DescribedGroupMember) Member {
	id := m.MemberID
	if m.InstanceID != nil && *m.InstanceID != "" {
		id = *m.InstanceID
	}
	out := Member{Group: group, ID: id, ClientID: m.ClientID}
	if assigned, ok := m.Assigned.AsConsumer(); ok {
		for _, t := range assigned.Topics {
			out.Partitions += len(t.Partitions)
		}
	}
	return out
}

// readiness fills in each instance's readiness: self's in process, the
// others' from their /readyz, asked at once, a few at a time. When
// several instances advertise this instance's own address (a loopback
// address on several hosts), none is taken for it.
func readiness(ctx context.Context, ins []Instance, self *Self) {
	selves := 0
	for _, in := range ins {
		if in.Self {
			selves++
		}
	}
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	for i := range ins {
		in := &ins[i]
		switch {
		case in.Self && selves > 1:
			in.Self = false
			in.Readiness, in.Detail = Unknown, "it advertises the admin address of the instance answering, from host "+in.Host+
				": set HOOKSTREAM_ADMIN_ADVERTISED_ADDR on every instance to an address the others reach"
		case in.Self:
			ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			in.set(self.Readiness(ctx))
			cancel()
		case in.AdminAddr == "":
			in.Readiness, in.Detail = Unknown, "it advertises no admin address"
		default:
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				r, err := probe(ctx, in.AdminAddr)
				if err != nil {
					in.Readiness, in.Detail = Unknown, err.Error()
					return
				}
				in.set(r)
			})
		}
	}
	wg.Wait()
}

// set takes an instance's readiness as its /readyz answered it.
func (in *Instance) set(r admin.Readiness) {
	in.Readiness, in.Checks = NotReady, make(map[string]bool, len(r.Checks))
	if r.Ready {
		in.Readiness = Ready
	}
	if len(r.Roles) > 0 {
		in.Roles = slices.Clone(r.Roles)
	}
	var failing []string
	for _, name := range slices.Sorted(maps.Keys(r.Checks)) {
		in.Checks[name] = r.Checks[name].Ready
		if !r.Checks[name].Ready {
			failing = append(failing, name)
		}
	}
	if len(failing) > 0 {
		in.Detail = "not ready: " + strings.Join(failing, ", ")
	}
}

// probe asks the instance at addr (host:port) for its /readyz. The
// address comes from a group member's client id, which any client allowed
// in the group chooses: the request carries no credential, follows no
// redirect, and only the readiness and the names of the checks are taken
// from the answer.
func probe(ctx context.Context, addr string) (admin.Readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil || req.URL.Host != addr {
		return admin.Readiness{}, fmt.Errorf("it advertises %q, which is no host:port", addr)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		why := errors.Unwrap(err)
		if why == nil {
			why = err
		}
		msg := fmt.Sprintf("its admin listener did not answer: %v", why)
		if host, _, _ := net.SplitHostPort(addr); admin.LoopbackHost(host) {
			msg += "; it advertises a loopback address, which only its own host reaches: set HOOKSTREAM_ADMIN_ADVERTISED_ADDR"
		}
		return admin.Readiness{}, errors.New(msg)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return admin.Readiness{}, fmt.Errorf("its /readyz answered %d", resp.StatusCode)
	}
	var r admin.Readiness
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProbeAnswer)).Decode(&r); err != nil {
		return admin.Readiness{}, errors.New("its /readyz answered something other than readiness")
	}
	if r.Ready != (resp.StatusCode == http.StatusOK) {
		return admin.Readiness{}, fmt.Errorf("its /readyz answered %d with ready %v", resp.StatusCode, r.Ready)
	}
	return r, nil
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
