// Package events is the events topic and each event's story as operators
// query them: a search of a time range by source and type, read in
// bounded pages with a cursor, in the order the events were written
// (search.go, merge.go), and the newest events (newest.go); the resend
// of one event to one subscription through the delivery-retry topic
// (resend.go); and an
// event's story, told by its entry in the processor's ledger (story.go,
// timeline.go), answered on the admin listener from this instance's
// processor when it owns the event's partition, and otherwise forwarded
// to the instance whose processor does, signed both ways (storyquery.go,
// peer.go). The admin API, the commands and the console call the same
// functions. A story and a resend are told and made for a caller
// (admin.Identity): a team's story holds only its subscriptions' deliveries
// and a team resends only to them; a viewer's story holds no error that
// may quote a body. The owner of a forwarded query tells the story by the
// role and team the query names under its signature.
//
// It owns reading the events topic for operators and the story query; it
// does not own the topic's content (the processor writes it), the ledger
// (the processor keeps it and lends its lookup: Ledger), nor delivery
// (the dispatcher delivers a resend like any retry).
package events
