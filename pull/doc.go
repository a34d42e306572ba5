// Package pull serves pull subscriptions: GET /subscriptions/{id}/events
// on the ingest listener, where a consumer that cannot receive webhooks
// reads what its subscription matches with its pull token. The cursor a
// consumer presents is its acknowledgment: it is committed as the
// subscription's cursor (the offsets of group <prefix>-sub-<id>, which
// lag and replay read) before the events after it are read, so repeating
// a request returns the same events and a lost answer loses nothing.
//
// It owns the cursor's format and authentication, reading the events
// topic at a cursor (read_committed, with Fetch requests of its own), the
// long-poll, the bounds on requests and answers, and the pull
// acknowledgments written to the attempts topic for the ledger. Which
// events a subscription receives and what it receives of them is
// subscriptions' (Compiled.Match and Render); the listener, its
// connections and timeouts are ingest's; dispatchers leave pull
// subscriptions alone.
package pull
