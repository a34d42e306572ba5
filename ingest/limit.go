package ingest

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Failed verifications allowed per client address: a provider with a
// wrong secret sees its 401s, a flood of forged requests gets 429.
const (
	failuresPerSecond = 1
	failureBurst      = 10
	// failureAddresses bounds the memory of the limiter: the least recently
	// failing addresses are forgotten first.
	failureAddresses = 10_000
)

// failureLimiter limits failed verifications per client address, apart
// from the sources' rate limits, which count verified requests only.
type failureLimiter struct {
	addrs *lru.Cache[netip.Prefix, *rate.Limiter]
}

func newFailureLimiter() (*failureLimiter, error) {
	addrs, err := lru.New[netip.Prefix, *rate.Limiter](failureAddresses)
	if err != nil {
		return nil, fmt.Errorf("ingest: failure limiter: %w", err)
	}
	return &failureLimiter{addrs: addrs}, nil
}

// fail counts a failed verification from ip at now and returns nil while
// the address is within its allowance, else the 429 to answer.
func (f *failureLimiter) fail(ip string, now time.Time) error {
	key := clientPrefix(ip)
	l, ok := f.addrs.Get(key)
	if !ok {
		l = rate.NewLimiter(failuresPerSecond, failureBurst)
		if prev, found, _ := f.addrs.PeekOrAdd(key, l); found {
			l = prev
		}
	}
	return reserve(l, now)
}

// reserve takes one event from l at now, or returns a 429 that says when
// to come back, taking nothing.
func reserve(l *rate.Limiter, now time.Time) error {
	r := l.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	if wait == 0 {
		return nil
	}
	r.CancelAt(now)
	return &apiError{status: http.StatusTooManyRequests, msg: "rate limited",
		retryAfter: strconv.Itoa(int(math.Ceil(max(wait, time.Second).Seconds())))}
}

// clientPrefix is the network a client address stands for: the address
// itself for IPv4, its /64 for IPv6 (one host holds a whole /64, so single
// addresses would not bound it).
func clientPrefix(ip string) netip.Prefix {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.Prefix{} // not an IP (a unix socket): one shared bucket
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}
