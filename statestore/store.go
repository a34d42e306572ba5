// Package statestore holds the processor's dedup state: one Pebble database
// per assigned ingest partition, mapping each event key (<source>:<event-id>)
// to its State, plus the changelog offset the store reflects.
//
// It owns the on-disk layout, the State codec (the changelog value is a
// State's binary form, the only one it reads), the ledger's shape, the
// expiry index, and the exact key count. It refuses to know Kafka: it never
// imports a Kafka client. The processor reads the changelog, decodes each
// record with DecodeChangelog and feeds the entries to Apply; it writes new
// states to the changelog in its transaction and, once committed, applies
// them here.
//
// # Durability contract
//
// The compacted changelog topic is the source of truth; a store is a local
// cache of it that can always be deleted (Destroy, or removing its directory
// while it is closed) and rebuilt by reading the changelog from offset 0.
// Apply writes the changes and the new checkpoint (the changelog offset to
// resume from) in one atomic Pebble batch, without syncing (pebble.NoSync):
// a crash of the process or the machine loses the latest batches, never part
// of one, so the store holds a consistent prefix of the changelog and its
// Checkpoint says where that prefix ends; restore resumes from there.
//
// A store whose files cannot be read as a store (a corrupt MANIFEST, OPTIONS
// or table, a missing table, a layout this code does not know) fails to open
// with an error wrapping ErrCorrupt: the caller destroys and rebuilds it. A
// store held by another process, or one the process may not read or write,
// gives other errors, which destroying would not cure; so does a file system
// with less room than opening needs (twice the memtable size and 1 MiB),
// with ENOSPC, rather than Pebble waiting for room where no caller sees it.
//
// When Pebble reports a failure it cannot recover from (a failed write to
// its log, a corruption found while reading or by a background job), the
// store stops: the call that hit it and every later call return an error,
// and only Close remains. Where Pebble panicked in a write, Close abandons
// the database (ErrAbandoned): its directory stays locked, and the store
// cannot be opened again, until the process exits. Pebble buffers its log, so a write error (a full
// disk) fails the Apply that finds it, possibly a few calls after the write
// that failed; what reached the disk is still a consistent prefix.
//
// # Layout
//
// In each database, under dir/p<partition>:
//
//	"s" + key                         -> State, binary form (38 bytes, then the ledger)
//	"x" + expiry (8 bytes) + key      -> empty: expiry index, in time order
//	"m/format", "m/checkpoint", "m/keys" -> 8-byte big-endian integers
//	"m/changelog"                     -> the changelog's identity (SetChangelog)
package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrCorrupt is wrapped by errors from a store that cannot be read: the
// caller should Destroy it and rebuild from the changelog.
var ErrCorrupt = errors.New("corrupt store")

// ErrAbandoned is wrapped by Close's error for a store whose database had to
// be abandoned (Pebble panicked in a write: a full disk, a failed log
// write). Its directory stays locked until the process exits, so the
// partition's store cannot be opened again before a restart.
var ErrAbandoned = errors.New("database abandoned after a pebble panic")

// Errors of a lookup in a processor's stores (processor.Processor.Lookup),
// which a story query branches on: the key's partition has no store here
// (another processor owns it, or none runs here), or its store is
// restoring from the changelog.
var (
	ErrNotOwned  = errors.New("partition not owned by this processor")
	ErrRestoring = errors.New("partition restoring")
)

const (
	prefixState  = 's'
	prefixExpiry = 'x'

	// layoutVersion is stored under m/format; bump it when the layout
	// or the stored value changes, and old stores are reported corrupt
	// and rebuilt from the changelog. Version 2 holds values of version
	// 4 and 5 (valueVersion), which both read.
	layoutVersion = 2

	// formatVersion pins Pebble's on-disk format: the newest stable one of
	// pebble v2.1.7. Raise it deliberately when upgrading Pebble.
	formatVersion = pebble.FormatValueSeparation

	defaultCacheSize    = 8 << 20
	defaultMemTableSize = 4 << 20
	memTables           = 2   // pebble's default MemTableStopWritesThreshold
	maxOpenFiles        = 256 // per store; a store holds few tables
)

var (
	keyFormat     = []byte("m/format")
	keyCheckpoint = []byte("m/checkpoint")
	keyKeys       = []byte("m/keys")
	keyChangelog  = []byte("m/changelog")
)

// Options tunes a store. The zero value is ready to use.
type Options struct {
	// FS is the file system; nil means the operating system's (tests use
	// vfs.NewMem()).
	FS vfs.FS
	// CacheSize is the block cache size in bytes, per store; 0 means 8 MiB.
	// A store uses about CacheSize + 2*MemTableSize of memory.
	CacheSize int64
	// MemTableSize is the size of one memtable in bytes; up to two exist
	// per store. 0 means 4 MiB.
	MemTableSize uint64
	// Logger receives Pebble's messages (info at debug level) and
	// background errors; nil discards them.
	Logger *slog.Logger
}

func (o *Options) fs() vfs.FS {
	if o.FS == nil {
		return vfs.Default
	}
	return o.FS
}

// Store is the state of one partition. Get, Checkpoint, Keys, Expired and
// OldestExpiry may be called concurrently with each other and with Apply;
// Apply calls are serialized. Close must not race with any other call.
type Store struct {
	db        *pebble.DB
	lock      *pebble.Lock
	partition int32
	log       *slog.Logger

	// fatal is the first unrecoverable error Pebble reported; once set the
	// store refuses every call but Close.
	fatal  atomic.Pointer[error]
	closed atomic.Bool
	// wedged is set when Pebble panicked in a commit, holding its commit
	// pipeline's lock: Close then abandons the database instead of hanging.
	wedged atomic.Bool

	checkpoint atomic.Int64
	keys       atomic.Int64

	mu                  sync.Mutex      // serializes Apply and guards what follows
	pending             map[string]Read // each key's state as of the changes seen so far in one Apply
	sk, val, oldX, newX []byte          // scratch buffers of Apply
}

// Change is one key's new state; a nil State deletes the key (a changelog
// tombstone).
type Change struct {
	Key   []byte
	State *State
	// Before is the key's state as Get read it before this Apply, when
	// the caller has it: Apply then does not read the key again for its
	// first change of the call, and takes Before at its word.
	Before *Read
}

// Read is what Get returned for a key: its state, if OK.
type Read struct {
	State State
	OK    bool
}

func dirname(fsys vfs.FS, dir string, partition int32) string {
	return fsys.PathJoin(dir, "p"+strconv.Itoa(int(partition)))
}

// Open opens the store of partition under dir (dir/p<partition>), creating
// it when missing. An unreadable or corrupt store gives an error wrapping
// ErrCorrupt; other errors (a lock held by another process, permissions)
// do not.
func Open(dir string, partition int32, opts Options) (*Store, error) {
	if partition < 0 {
		return nil, fmt.Errorf("statestore: open partition %d: negative partition", partition)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "statestore", "partition", partition)
	s := &Store{partition: partition, log: log, pending: make(map[string]Read)}
	po := &pebble.Options{
		FS:                          opts.fs(),
		CacheSize:                   opts.CacheSize,
		MemTableSize:                opts.MemTableSize,
		MemTableStopWritesThreshold: memTables,
		MaxOpenFiles:                maxOpenFiles,
		FormatMajorVersion:          formatVersion,
		Logger:                      pebbleLogger{s},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				log.Error("pebble background error", "err", err)
			},
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				s.fail(fmt.Errorf("%w: %s", ErrCorrupt, info))
			},
		},
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = defaultMemTableSize
	}
	if po.CacheSize <= 0 {
		po.CacheSize = defaultCacheSize
	}
	// Pebble charges its memtables to the block cache; without room for
	// them, nothing would be cached.
	po.CacheSize += memTables * int64(po.MemTableSize)
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10) // inherited by every level

	path := dirname(po.FS, dir, partition)
	if err := mkdirAll(po.FS, path); err != nil {
		return nil, fmt.Errorf("statestore: open partition %d: %w", partition, err)
	}
	// Taking the lock before pebble.Open sets "in use" apart from
	// "corrupt": a store held by another process must not be destroyed.
	lock, err := pebble.LockDirectory(path, po.FS)
	if err != nil {
		return nil, fmt.Errorf("statestore: open partition %d: %w", partition, err)
	}
	po.Lock = lock
	if err := roomToOpen(po.FS, path, po.MemTableSize); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("statestore: open partition %d: %w", partition, err)
	}
	db, err := pebble.Open(path, po)
	if err == nil {
		s.db, s.lock = db, lock
		if err = s.load(); err == nil {
			err = s.usable() // a fatal error while loading
		}
		if err != nil {
			_ = s.Close() // the load error says more
			return nil, fmt.Errorf("statestore: open partition %d: %w", partition, s.classifyOpen(err))
		}
		return s, nil
	}
	_ = lock.Close()
	return nil, fmt.Errorf("statestore: open partition %d: %w", partition, s.classifyOpen(err))
}

// roomToOpen refuses to open a store on a file system with less room than
// Pebble needs to open it: a flush of what its log holds (at most its
// memtables) and a new log. Pebble's Open waits for that flush, retrying
// it until there is room, and cannot be cancelled; refused here, the caller
// can say why and try again. A file system that does not tell its usage
// is not checked.
func roomToOpen(fsys vfs.FS, dir string, memTableSize uint64) error {
	usage, err := fsys.GetDiskUsage(dir)
	if err != nil {
		return nil
	}
	if need := memTables*memTableSize + 1<<20; usage.AvailBytes < need {
		return fmt.Errorf("%d bytes free on %s, want at least %d: %w", usage.AvailBytes, dir, need, syscall.ENOSPC)
	}
	return nil
}

// mkdirAll creates dir and its missing parents, then syncs the directories
// holding the new entries, so that a crash does not lose the store with its
// directory (as pebble.Open does for the directories it creates).
func mkdirAll(fsys vfs.FS, dir string) error {
	var parents []string // from dir's parent up to its closest existing ancestor
	for p := fsys.PathDir(dir); ; p = fsys.PathDir(p) {
		parents = append(parents, p)
		if fsys.PathDir(p) == p {
			break
		}
		if _, err := fsys.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if _, err := fsys.Stat(dir); err == nil {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range parents {
		d, err := fsys.OpenDir(p)
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// classifyOpen wraps ErrCorrupt around every failure of pebble.Open and load
// but those of the environment, which destroying the store would not cure:
// permissions, a full disk or quota, a read-only file system, too many open
// files. Pebble marks only some of its corruption errors (a missing or
// truncated table is not marked), hence the exclusion list.
func (s *Store) classifyOpen(err error) error {
	err = s.classify(err)
	for _, env := range []error{fs.ErrPermission, syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EMFILE, syscall.ENFILE} {
		if errors.Is(err, env) {
			return err
		}
	}
	if !errors.Is(err, ErrCorrupt) {
		err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// load reads the metadata of a freshly opened store, initializing a new one.
func (s *Store) load() error {
	format, ok, err := s.getInt(keyFormat)
	if err != nil {
		return err
	}
	if !ok {
		// A new store, unless it holds keys: then it is not ours or lost
		// its metadata.
		it, err := s.db.NewIter(nil)
		if err != nil {
			return err
		}
		nonEmpty := it.First()
		if err := it.Close(); err != nil {
			return err
		}
		if nonEmpty {
			return fmt.Errorf("%w: keys without %s", ErrCorrupt, keyFormat)
		}
		b := s.db.NewBatch()
		defer s.closeBatch(b)
		for _, k := range [][]byte{keyFormat, keyCheckpoint, keyKeys} {
			v := int64(0)
			if bytes.Equal(k, keyFormat) {
				v = layoutVersion
			}
			if err := b.Set(k, binary.BigEndian.AppendUint64(nil, uint64(v)), nil); err != nil {
				return err
			}
		}
		return s.commit(b, pebble.Sync)
	}
	if format != layoutVersion {
		return fmt.Errorf("%w: layout version %d, want %d", ErrCorrupt, format, layoutVersion)
	}
	checkpoint, ok1, err := s.getInt(keyCheckpoint)
	if err != nil {
		return err
	}
	keys, ok2, err := s.getInt(keyKeys)
	if err != nil {
		return err
	}
	if !ok1 || !ok2 || checkpoint < 0 || keys < 0 {
		return fmt.Errorf("%w: missing or negative checkpoint or key count", ErrCorrupt)
	}
	s.checkpoint.Store(checkpoint)
	s.keys.Store(keys)
	return nil
}

func (s *Store) getInt(k []byte) (v int64, ok bool, err error) {
	b, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(b) != 8 {
		return 0, false, fmt.Errorf("%w: %s: %d bytes", ErrCorrupt, k, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), true, nil
}

// classify prefers the fatal error Pebble reported (it says more than the
// error returned after it) and marks Pebble's corruption errors with
// ErrCorrupt.
func (s *Store) classify(err error) error {
	if f := s.fatal.Load(); f != nil {
		err = *f
	}
	if pebble.IsCorruptionError(err) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// Destroy deletes the store of partition under dir; it is a no-op when the
// store does not exist. The store must not be open.
func Destroy(dir string, partition int32, opts Options) error {
	fsys := opts.fs()
	if err := fsys.RemoveAll(dirname(fsys, dir, partition)); err != nil {
		return fmt.Errorf("statestore: destroy partition %d: %w", partition, err)
	}
	return nil
}

// Partition returns the partition of the store.
func (s *Store) Partition() int32 { return s.partition }

// Checkpoint returns the changelog offset to resume reading from: the offset
// after the last applied entry, 0 for a new store.
func (s *Store) Checkpoint() int64 { return s.checkpoint.Load() }

// Changelog returns the identity of the changelog the store reflects, as
// SetChangelog recorded it: empty when none was. A checkpoint is an offset
// of that changelog only: a store of another (topics deleted and created
// anew, another topic prefix) must be rebuilt, not read on from it.
func (s *Store) Changelog() (string, error) {
	if err := s.usable(); err != nil {
		return "", err
	}
	b, closer, err := s.db.Get(keyChangelog)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", s.classify(err)
	}
	defer closer.Close()
	return string(b), nil
}

// SetChangelog records id as the identity of the changelog the store
// reflects (Changelog).
func (s *Store) SetChangelog(id string) error {
	if err := s.usable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer s.closeBatch(b)
	if err := b.Set(keyChangelog, []byte(id), nil); err != nil {
		return err
	}
	return s.classify(s.commit(b, pebble.Sync))
}

// Keys returns the number of keys in the store.
func (s *Store) Keys() int64 { return s.keys.Load() }

// usable returns the error that stops every call, if any.
func (s *Store) usable() error {
	if s.closed.Load() {
		return fmt.Errorf("statestore: partition %d: %w", s.partition, pebble.ErrClosed)
	}
	if f := s.fatal.Load(); f != nil {
		return fmt.Errorf("statestore: partition %d: store failed: %w", s.partition, *f)
	}
	return nil
}

// Get returns the state of key; ok is false when the key is absent. It does
// not filter expired states: the caller compares State.Expires with its
// clock.
func (s *Store) Get(key []byte) (st State, ok bool, err error) {
	if err := s.usable(); err != nil {
		return State{}, false, err
	}
	k := make([]byte, 0, 64)
	k = append(append(k, prefixState), key...)
	st, ok, err = s.get(k)
	if err == nil {
		err = s.usable() // a corruption found during the read
	}
	if err != nil {
		return State{}, false, fmt.Errorf("statestore: partition %d: get %q: %w", s.partition, key, s.classify(err))
	}
	return st, ok, nil
}

// get reads the state under the store key k ("s" + key).
func (s *Store) get(k []byte) (State, bool, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	st, err := decodeValue(v)
	closer.Close()
	if err != nil {
		return State{}, false, err
	}
	return st, true, nil
}

// Apply writes changes and the new checkpoint in one atomic batch; of several
// changes of one key, the last wins. Writes are not synced (see the package
// documentation). The checkpoint must not go back; a key must not be empty
// and a state must have a known status. On error nothing is applied and
// Checkpoint and Keys are unchanged.
func (s *Store) Apply(changes []Change, checkpoint int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if cur := s.checkpoint.Load(); checkpoint < cur {
		return fmt.Errorf("statestore: partition %d: apply: checkpoint %d before current %d", s.partition, checkpoint, cur)
	}
	if len(changes) == 0 && checkpoint == s.checkpoint.Load() {
		return nil
	}
	keys, err := s.apply(changes, checkpoint)
	if err == nil {
		err = s.usable() // a fatal commit error is reported to the logger, not returned
	}
	if err != nil {
		return fmt.Errorf("statestore: partition %d: apply: %w", s.partition, s.classify(err))
	}
	s.checkpoint.Store(checkpoint)
	s.keys.Store(keys)
	return nil
}

// apply builds and commits the batch of Apply and returns the new key count.
func (s *Store) apply(changes []Change, checkpoint int64) (int64, error) {
	b := s.db.NewBatch()
	defer s.closeBatch(b)
	keys, err := s.build(b, changes)
	if err != nil {
		return 0, err
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(checkpoint))
	if err := b.Set(keyCheckpoint, n[:], nil); err != nil {
		return 0, err
	}
	binary.BigEndian.PutUint64(n[:], uint64(keys))
	if err := b.Set(keyKeys, n[:], nil); err != nil {
		return 0, err
	}
	return keys, s.commit(b, pebble.NoSync)
}

// build adds changes to b, reading the old states to keep the expiry index
// and the key count right, and returns the new key count.
func (s *Store) build(b *pebble.Batch, changes []Change) (keys int64, err error) {
	var it *pebble.Iterator // one for every read of the call: cheaper than Gets
	defer func() {
		if it != nil {
			if cerr := it.Close(); err == nil {
				err = cerr
			}
		}
	}()
	clear(s.pending)
	keys = s.keys.Load()
	for _, c := range changes {
		if len(c.Key) == 0 {
			return 0, errors.New("empty key")
		}
		if c.State != nil && !c.State.Status.valid() {
			return 0, fmt.Errorf("key %q: unknown status %d", c.Key, uint8(c.State.Status))
		}
		s.sk = append(append(s.sk[:0], prefixState), c.Key...)
		old, ok := s.pending[string(c.Key)]
		switch {
		case ok:
		case c.Before != nil:
			old = *c.Before
		default:
			if old.State, old.OK, err = s.lookup(&it, s.sk); err != nil {
				return 0, fmt.Errorf("key %q: %w", c.Key, err)
			}
		}
		s.pending[string(c.Key)] = Read{State: deref(c.State), OK: c.State != nil}

		// The batch copies keys and values, so the scratch buffers are
		// reused from one change to the next.
		if old.OK {
			s.oldX = appendExpiryKey(s.oldX[:0], old.State.Expires, c.Key)
		}
		switch {
		case c.State == nil && !old.OK:
			// Deleting an absent key: nothing to write.
		case c.State == nil:
			keys--
			if err := b.Delete(s.sk, nil); err != nil {
				return 0, err
			}
			if err := b.Delete(s.oldX, nil); err != nil {
				return 0, err
			}
		default:
			if !old.OK {
				keys++
			}
			s.val = appendValue(s.val[:0], c.State)
			if err := b.Set(s.sk, s.val, nil); err != nil {
				return 0, err
			}
			s.newX = appendExpiryKey(s.newX[:0], c.State.Expires, c.Key)
			if old.OK && !bytes.Equal(s.oldX, s.newX) {
				if err := b.Delete(s.oldX, nil); err != nil {
					return 0, err
				}
			}
			if err := b.Set(s.newX, nil, nil); err != nil {
				return 0, err
			}
		}
	}
	return keys, nil
}

// commit applies b. Pebble panics when the write-ahead log fails (with
// NoSync its writer reports a full disk only then); commit turns the panic
// into an error and stops the store, which stays wedged: Pebble still holds
// its commit lock. Where the panic comes from rotating the log, Pebble's own
// deferred unlocks can end the process before the recover runs (a runtime
// fatal error, not a panic): the process then restarts and restores from
// the changelog, which loses and repeats nothing.
func (s *Store) commit(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		s.wedged.Store(true)
		e, ok := r.(error)
		if !ok {
			e = fmt.Errorf("%v", r)
		}
		err = fmt.Errorf("pebble panicked: %w", e)
		s.fail(err, "stack", string(debug.Stack()))
	}()
	return s.db.Apply(b, opts)
}

// lookup reads the state under the store key k with *it, creating the
// iterator on first use.
func (s *Store) lookup(it **pebble.Iterator, k []byte) (State, bool, error) {
	if *it == nil {
		var err error
		*it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixState}, UpperBound: []byte{prefixState + 1}})
		if err != nil {
			return State{}, false, err
		}
	}
	if !(*it).SeekPrefixGE(k) || !bytes.Equal((*it).Key(), k) {
		return State{}, false, (*it).Error()
	}
	v, err := (*it).ValueAndErr()
	if err != nil {
		return State{}, false, err
	}
	st, err := decodeValue(v)
	return st, err == nil, err
}

// closeBatch releases b, unless a wedged commit pipeline may still refer
// to it.
func (s *Store) closeBatch(b *pebble.Batch) {
	if !s.wedged.Load() {
		_ = b.Close()
	}
}

func deref(st *State) State {
	if st == nil {
		return State{}
	}
	return *st
}

// Expired returns up to limit keys whose Expires is at or before now, in
// expiry order, from the expiry index.
func (s *Store) Expired(now time.Time, limit int) ([][]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	upper := []byte{prefixExpiry + 1}
	if n := expiryNanos(now); n != math.MaxInt64 {
		upper = binary.BigEndian.AppendUint64([]byte{prefixExpiry}, (n+1)^(1<<63))
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixExpiry}, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("statestore: partition %d: expired: %w", s.partition, s.classify(err))
	}
	var out [][]byte
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		k := it.Key()
		if len(k) <= 9 {
			_ = it.Close()
			return nil, fmt.Errorf("statestore: partition %d: expired: %w: index key %q", s.partition, ErrCorrupt, k)
		}
		out = append(out, bytes.Clone(k[9:]))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("statestore: partition %d: expired: %w", s.partition, s.classify(err))
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	return out, nil
}

// OldestExpiry returns the earliest Expires in the store, from the expiry
// index; ok is false when the store holds no key. The time a key has waited
// past it tells how far the sweep lags.
func (s *Store) OldestExpiry() (expires time.Time, ok bool, err error) {
	if err := s.usable(); err != nil {
		return time.Time{}, false, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixExpiry}, UpperBound: []byte{prefixExpiry + 1}})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("statestore: partition %d: oldest expiry: %w", s.partition, s.classify(err))
	}
	if it.First() {
		k := it.Key()
		if len(k) <= 9 {
			_ = it.Close()
			return time.Time{}, false, fmt.Errorf("statestore: partition %d: oldest expiry: %w: index key %q", s.partition, ErrCorrupt, k)
		}
		expires, ok = time.Unix(0, int64(binary.BigEndian.Uint64(k[1:9])^(1<<63))).UTC(), true
	}
	if err := it.Close(); err != nil {
		return time.Time{}, false, fmt.Errorf("statestore: partition %d: oldest expiry: %w", s.partition, s.classify(err))
	}
	if err := s.usable(); err != nil {
		return time.Time{}, false, err
	}
	return expires, ok, nil
}

// Close closes the store; later calls fail, and a second Close returns nil.
// After Pebble panicked in Apply, Close cannot close the database: it
// abandons it and says so, and the store's directory stays locked until the
// process exits.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	if s.wedged.Load() {
		return fmt.Errorf("statestore: close partition %d: %w (%w); its directory stays locked until the process exits", s.partition, ErrAbandoned, *s.fatal.Load())
	}
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("statestore: close partition %d: %w", s.partition, err)
	}
	return nil
}

// fail records the first unrecoverable error, which stops the store, and
// logs it.
func (s *Store) fail(err error, attrs ...any) {
	if s.fatal.CompareAndSwap(nil, &err) {
		s.log.Error("store stopped", append([]any{"err", err.Error()}, attrs...)...)
	}
}

// pebbleLogger routes Pebble's logging to slog. Pebble calls Fatalf when it
// cannot go on (its default logger exits the process); this one records the
// error, which stops the store, and returns: the store is a cache, and
// hookstream stops the partition rather than the process.
type pebbleLogger struct{ s *Store }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.s.log.Debug(fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.s.log.Error(fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.err = e // keeps errors.Is working, e.g. for syscall.ENOSPC
			break
		}
	}
	l.s.fail(err)
}

// fatalError is a message Pebble passed to Fatalf, with the error among its
// arguments.
type fatalError struct {
	msg string
	err error
}

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Unwrap() error { return e.err }
