package dispatch

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// failureRun is a subscription's failures in a row on this dispatcher:
// real attempts that failed and events its transform dead-lettered. A
// success ends it. It holds one reason, however long the run: its memory
// is bounded.
type failureRun struct {
	failures int
	since    time.Time
	reason   string
}

// fail adds a failure, at now, for reason.
func (r *failureRun) fail(now time.Time, reason string) {
	if r.failures == 0 {
		r.since = now
	}
	r.failures++
	r.reason = reason
}

// failing is the run as the readiness detail tells it; false while it is
// shorter than subscriptions.FailingAfter.
func (r failureRun) failing() (subscriptions.Failing, bool) {
	if r.failures < subscriptions.FailingAfter {
		return subscriptions.Failing{}, false
	}
	return subscriptions.Failing{Reason: r.reason, Since: r.since, Failures: r.failures}, true
}

// attemptReason is why a failed attempt failed, as people say it: the
// subscriber's status ("401 Unauthorized"), a host that does not resolve,
// or the error.
func attemptReason(res result) string {
	var dns *net.DNSError
	switch {
	case res.status != 0 && (res.status < 200 || res.status > 299):
		return fmt.Sprintf("%d %s", res.status, http.StatusText(res.status))
	case errors.As(res.err, &dns) && dns.IsNotFound:
		return "host does not resolve: " + dns.Name
	case res.err != nil:
		return errorText(res.err)
	}
	return "failed"
}

// transformFailed adds an event the transform of subscription id
// dead-lettered, with cause, to its run of failures.
func (d *Dispatcher) transformFailed(id, cause string) {
	st := d.subscription(id)
	if st == nil {
		return // deleted meanwhile
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failures.fail(d.now(), "transform error: "+strings.TrimPrefix(cause, "transform: "))
}

// failing returns the failing subscriptions, by id.
func (d *Dispatcher) failing() map[string]subscriptions.Failing {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]subscriptions.Failing)
	for id, st := range d.subs {
		st.mu.Lock()
		if f, ok := st.failures.failing(); ok {
			out[id] = f
		}
		st.mu.Unlock()
	}
	return out
}
