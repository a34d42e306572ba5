package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// network puts Toxiproxy, in this process, between every hookstream
// process and each broker, and between the dispatchers and the
// subscribers, so that faults can slow, cut or black-hole the traffic of
// every process or of one.
//
// Kafka clients connect to the addresses the brokers advertise, so each
// broker advertises a front of this network (kfake through the address
// its listener reports, Apache Kafka through a PROXIED listener: see
// scripts/kafka-local.sh --proxy-port). A front finds which process
// opened each connection (the peer socket's inode in /proc/net/tcp, and
// the process holding it among its file descriptors) and hands it to that
// process's own Toxiproxy proxy of the broker; a connection of any other
// process (the CLI, this campaign's checks) goes to the broker directly.
// So one process can be cut off while the others keep working.
type network struct {
	srv    *toxiproxy.ApiServer
	log    *slog.Logger
	fronts []*front

	mu    sync.Mutex
	pids  func() map[int]string         // running processes: pid -> name
	links map[string][]*toxiproxy.Proxy // process name -> a proxy per broker
	subs  *toxiproxy.Proxy              // in front of the subscribers
}

// front is where clients reach one broker: the address it advertises.
type front struct {
	n        *network
	broker   int
	ln       net.Listener
	upstream string // the broker's listener

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// newNetwork listens on each front address; upstreams[i] is the listener
// of the broker that advertises fronts[i]. Until follow names processes,
// every connection goes to its broker directly.
func newNetwork(fronts, upstreams []string, log *slog.Logger) (*network, error) {
	n := &network{
		srv:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		log:   log,
		pids:  func() map[int]string { return nil },
		links: make(map[string][]*toxiproxy.Proxy),
	}
	for i, addr := range fronts {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("fault proxy front of broker %d: %w", i+1, err)
		}
		f := &front{n: n, broker: i, ln: ln, upstream: upstreams[i], conns: make(map[net.Conn]bool)}
		n.fronts = append(n.fronts, f)
		f.wg.Go(f.serve)
	}
	return n, nil
}

// follow sets how the processes are found: pids returns the running
// ones, pid -> name.
func (n *network) follow(pids func() map[int]string) {
	n.mu.Lock()
	n.pids = pids
	n.mu.Unlock()
}

// proxy starts a Toxiproxy proxy on a free loopback port.
func (n *network) proxy(name, upstream string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("fault proxy %s: %w", name, err)
	}
	return p, nil
}

// addProcess gives the process name its own proxy of every broker.
func (n *network) addProcess(name string) error {
	var ps []*toxiproxy.Proxy
	for i, f := range n.fronts {
		p, err := n.proxy(fmt.Sprintf("%s-broker%d", name, i+1), f.upstream)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	n.mu.Lock()
	n.links[name] = ps
	n.mu.Unlock()
	return nil
}

// proxySubscribers puts a proxy in front of the subscribers at addr and
// returns the address to give subscriptions instead.
func (n *network) proxySubscribers(addr string) (string, error) {
	p, err := n.proxy("subscribers", addr)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	n.subs = p
	n.mu.Unlock()
	return p.Listen, nil
}

// brokerLinks returns the broker proxies of the named processes, or of
// every process when none is named.
func (n *network) brokerLinks(names ...string) []*toxiproxy.Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*toxiproxy.Proxy
	for name, ps := range n.links {
		if len(names) == 0 || slices.Contains(names, name) {
			out = append(out, ps...)
		}
	}
	return out
}

// toxic adds a toxic of kind (a Toxiproxy toxic type) with attrs to both
// directions of every proxy in links, and returns what removes them.
func (n *network) toxic(links []*toxiproxy.Proxy, name, kind string, attrs map[string]any) (remove func(), err error) {
	type added struct {
		p    *toxiproxy.Proxy
		name string
	}
	var done []added
	remove = func() {
		for _, a := range done {
			if err := a.p.Toxics.RemoveToxic(context.Background(), a.name); err != nil {
				n.log.Warn("removing a toxic", "proxy", a.p.Name, "toxic", a.name, "err", err)
			}
		}
	}
	for _, p := range links {
		for _, stream := range []string{"upstream", "downstream"} {
			spec, _ := json.Marshal(map[string]any{"name": name + "_" + stream, "type": kind, "stream": stream, "attributes": attrs})
			if _, err := p.Toxics.AddToxicJson(bytes.NewReader(spec)); err != nil {
				remove()
				return nil, fmt.Errorf("toxic %s on %s: %w", kind, p.Name, err)
			}
			done = append(done, added{p, name + "_" + stream})
		}
	}
	return remove, nil
}

func (n *network) close() {
	for _, f := range n.fronts {
		f.close()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ps := range n.links {
		for _, p := range ps {
			p.Stop()
		}
	}
	if n.subs != nil {
		n.subs.Stop()
	}
}

// serve hands each connection to its process's proxy, or to the broker.
func (f *front) serve() {
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Go(func() { f.handle(conn) })
	}
}

func (f *front) handle(conn net.Conn) {
	target := f.upstream
	f.n.mu.Lock()
	pids := f.n.pids
	f.n.mu.Unlock()
	if owner := connOwner(conn, pids()); owner != "" {
		f.n.mu.Lock()
		if ps := f.n.links[owner]; len(ps) > f.broker {
			target = ps[f.broker].Listen
		}
		f.n.mu.Unlock()
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		conn.Close()
		return
	}
	if !f.track(conn, up) {
		return
	}
	defer f.untrack(conn, up)
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, conn) })
	pipe(conn, up)
	wg.Wait()
}

// pipe copies from src to dst until either ends, then closes both; a
// connection reset on src is passed on as a reset of dst.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if errors.Is(err, syscall.ECONNRESET) {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with a RST
		}
	}
	dst.Close()
	src.Close()
}

func (f *front) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil { // closed
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		f.conns[c] = true
	}
	return true
}

func (f *front) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		delete(f.conns, c)
	}
}

func (f *front) close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// connOwner names the process of pids that opened conn, a loopback TCP
// connection accepted here: the owner of the socket whose local port is
// conn's remote port and whose remote port is conn's local port. It
// returns "" for any other process.
func connOwner(conn net.Conn, pids map[int]string) string {
	local, ok1 := conn.LocalAddr().(*net.TCPAddr)
	remote, ok2 := conn.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	inode := socketInode(remote.Port, local.Port)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	for pid, name := range pids {
		fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		entries, err := os.ReadDir(fds)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if link, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && link == want {
				return name
			}
		}
	}
	return ""
}

// socketInode returns the inode of the IPv4 socket from port localPort to
// port remotePort, as /proc/net/tcp lists it, or "".
func socketInode(localPort, remotePort int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	lp, rp := fmt.Sprintf(":%04X", localPort), fmt.Sprintf(":%04X", remotePort)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) >= 10 && strings.HasSuffix(fs[1], lp) && strings.HasSuffix(fs[2], rp) {
			return fs[9]
		}
	}
	return ""
}
