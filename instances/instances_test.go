package instances_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

const token = "t0ken"

// adminServer serves an admin listener with roles and one check named
// check whose readiness is ready, at the address it is configured with.
func adminServer(t *testing.T, roles []string, check string, ready *atomic.Bool) (*admin.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := admin.New(admin.Config{Addr: addr, Token: token, Roles: roles}, prometheus.NewRegistry(), kafkatest.Logger(t))
	srv.AddCheck(check, func(context.Context) (bool, any) { return ready.Load(), nil })
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: srv}}
	hs.Start()
	t.Cleanup(hs.Close)
	return srv, addr
}

// join puts a consumer of topic in group with clientID, as an instance's
// role does, until the test ends.
func join(t *testing.T, env *kafkatest.Env, group topics.Group, topic topics.Topic, clientID string) {
	t.Helper()
	cl := env.Client(t, kgo.ClientID(clientID), kgo.ConsumerGroup(string(group)), kgo.ConsumeTopics(string(topic)), kgo.DisableAutoCommit())
	go cl.PollFetches(context.Background()) // joins; closed at cleanup
}

// TestInstances: two instances that advertise their admin listeners, one
// processor and dispatcher (the one asked) and one dispatcher not ready, a
// processor whose advertised listener is down, and a foreign member of
// the retry group that advertises none: each is listed once with its
// roles, members and readiness, as far as it can be known.
func TestInstances(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	names := env.Names
	var yes, no atomic.Bool
	yes.Store(true)
	self, selfAddr := adminServer(t, []string{"ingest", "processor", "dispatcher"}, "processor", &yes)
	instances.New(env.ClusterOf(env.Client(t))).Mount(self)
	_, otherAddr := adminServer(t, []string{"dispatcher"}, "dispatcher", &no)
	downAddr := kafkatest.FreeAddr(t)

	join(t, env, names.ProcessorGroup(), names.Ingest, topics.MemberClientID("processor", selfAddr))
	join(t, env, names.RetryGroup(), names.DeliveryRetry, topics.MemberClientID("dispatcher", selfAddr))
	join(t, env, names.RetryGroup(), names.DeliveryRetry, topics.MemberClientID("dispatcher", otherAddr))
	join(t, env, names.ProcessorGroup(), names.Ingest, topics.MemberClientID("processor", downAddr))
	join(t, env, names.RetryGroup(), names.DeliveryRetry, "kgo")

	var list instances.List
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+selfAddr+"/api/instances", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /api/instances: %d %s", resp.StatusCode, body)
		}
		list = instances.List{}
		if err := json.Unmarshal(body, &list); err != nil {
			return err
		}
		members := 0
		for _, in := range list.Instances {
			members += len(in.Members)
			for _, m := range in.Members {
				if m.Partitions == 0 && m.Group == string(names.ProcessorGroup()) {
					return fmt.Errorf("processor member %s has no partitions yet", m.ID)
				}
			}
		}
		if members != 5 {
			return fmt.Errorf("got %d members, want 5: %+v", members, list)
		}
		return nil
	})

	var got []string
	for _, in := range list.Instances {
		line := fmt.Sprintf("%s self=%v roles=%s %s members=%d checks=%v", in.AdminAddr, in.Self, strings.Join(in.Roles, ","), in.Readiness, len(in.Members), in.Checks)
		got = append(got, line)
		switch {
		case in.AdminAddr == downAddr && !strings.Contains(in.Detail, "its admin listener did not answer"):
			t.Errorf("%s: detail %q, want that it did not answer", downAddr, in.Detail)
		case in.AdminAddr == otherAddr && in.Detail != "not ready: dispatcher":
			t.Errorf("%s: detail %q, want the check not ready", otherAddr, in.Detail)
		case in.AdminAddr == "" && in.Detail != "it advertises no admin address":
			t.Errorf("member without an address: detail %q, want that it advertises none", in.Detail)
		}
	}
	others := []string{
		otherAddr + " self=false roles=dispatcher not_ready members=1 checks=map[dispatcher:false]",
		downAddr + " self=false roles=processor unknown members=1 checks=map[]",
	}
	slices.Sort(others) // by address, after the instance asking and the one without an address
	want := append([]string{
		selfAddr + " self=true roles=dispatcher,ingest,processor ready members=2 checks=map[processor:true]",
		" self=false roles=dispatcher unknown members=1 checks=map[]",
	}, others...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("instances:\ngot  %q\nwant %q", got, want)
	}
}
