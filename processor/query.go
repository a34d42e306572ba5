package processor

import (
	"fmt"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// Interactive queries: every processor answers for the keys of the
// partitions it owns, from its store, and says where the others are. A
// processor advertises its admin listener in its group client id
// (ClientID), which the group's description shows beside each member's
// assignment: no registry to keep, and an owner is known exactly when the
// group says it owns the partition. The story query (events.StoryQuery)
// serves them on the admin listener.

// Lookup returns the state of key, of ingest partition partition, from
// this processor's store: an error wrapping statestore.ErrNotOwned when
// the processor does not own the partition, statestore.ErrRestoring while
// its store restores.
func (p *Processor) Lookup(partition int32, key []byte) (statestore.State, bool, error) {
	part := p.partition(partition)
	if part == nil {
		return statestore.State{}, false, fmt.Errorf("processor: partition %d: %w", partition, statestore.ErrNotOwned)
	}
	part.query.RLock()
	defer part.query.RUnlock()
	if !part.ready.Load() || part.store == nil {
		return statestore.State{}, false, fmt.Errorf("processor: partition %d: %w", partition, statestore.ErrRestoring)
	}
	return part.store.Get(key)
}

// ClientID is the group client id of a processor whose admin listener is
// adminAddr (host:port): hookstream-processor@host:port
// (topics.MemberClientID).
func ClientID(adminAddr string) string { return topics.MemberClientID(topics.RoleProcessor, adminAddr) }

// InstanceID is this processor's static group instance id (its
// transactional id), which the group's description shows beside each
// member: how an instance recognises its own processor there.
func (p *Processor) InstanceID() string { return p.cfg.TransactionalID }
