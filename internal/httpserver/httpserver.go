// Package httpserver holds what hookstream's HTTP listeners share beyond
// Echo's defaults.
package httpserver

import (
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/labstack/echo/v5"
)

// DropUnusedConns makes s.Shutdown close the connections on which no
// request has begun. net/http counts such a connection as active for its
// first 5 seconds (golang/go#22682), so a browser's preconnected socket,
// or a client that connected and has sent nothing yet, holds a graceful
// shutdown that long; closing it answers nothing that was asked, and the
// client connects again elsewhere. Requests under way still finish. It
// keeps any ConnState hook s has.
func DropUnusedConns(s *http.Server) {
	var mu sync.Mutex
	unused := make(map[net.Conn]struct{})
	hook := s.ConnState
	s.ConnState = func(c net.Conn, state http.ConnState) {
		mu.Lock()
		if state == http.StateNew {
			unused[c] = struct{}{}
		} else {
			delete(unused, c)
		}
		mu.Unlock()
		if hook != nil {
			hook(c, state)
		}
	}
	s.RegisterOnShutdown(func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range unused {
			_ = c.Close()
			delete(unused, c)
		}
	})
}

// ClientIP is the echo.IPExtractor of a listener behind the proxies of
// trusted (HOOKSTREAM_TRUSTED_PROXIES): the connection's address, or,
// from one of them, the nearest address of X-Forwarded-For outside them
// (what the first proxy saw, not what a client wrote before it). Only the
// given networks are trusted, not echo's default loopback, link-local and
// private ones.
func ClientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
