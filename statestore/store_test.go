package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// openMem opens partition 0 of a store on a fresh in-memory file system and
// closes it at the end of the test.
func openMem(t testing.TB) *Store {
	t.Helper()
	s, err := Open("state", 0, Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func st(status Status, offset int64, expires time.Time) *State {
	return &State{Status: status, Partition: 2, Offset: offset, FirstSeen: t0, Expires: expires}
}

func set(key string, s *State) Change { return Change{Key: []byte(key), State: s} }
func del(key string) Change           { return Change{Key: []byte(key)} }

type batch struct {
	changes    []Change
	checkpoint int64
}

func apply(t testing.TB, s *Store, batches ...batch) {
	t.Helper()
	for _, b := range batches {
		if err := s.Apply(b.changes, b.checkpoint); err != nil {
			t.Fatalf("Apply(checkpoint %d): %v", b.checkpoint, err)
		}
	}
}

// checkContents checks that s holds exactly want: Get of every key in want
// and in absent, Keys, and the expiry index (all keys, in expiry order).
func checkContents(t *testing.T, s *Store, want map[string]*State, absent ...string) {
	t.Helper()
	for k, w := range want {
		got, ok, err := s.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		if !ok || !sameState(got, *w) {
			t.Errorf("Get(%q): got %+v, %v, want %+v, true", k, got, ok, *w)
		}
	}
	for _, k := range absent {
		if _, ok, err := s.Get([]byte(k)); ok || err != nil {
			t.Errorf("Get(%q): got ok=%v, err=%v, want false, nil", k, ok, err)
		}
	}
	if got, want := s.Keys(), int64(len(want)); got != want {
		t.Errorf("Keys: got %d, want %d", got, want)
	}
	var wantIndex []string
	for k := range want {
		wantIndex = append(wantIndex, k)
	}
	slices.SortFunc(wantIndex, func(a, b string) int {
		if c := want[a].Expires.Compare(want[b].Expires); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if got, want := expired(t, s, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 1<<20), strings.Join(wantIndex, ","); got != want {
		t.Errorf("expiry index: got %q, want %q", got, want)
	}
}

func expired(t *testing.T, s *Store, now time.Time, limit int) string {
	t.Helper()
	keys, err := s.Expired(now, limit)
	if err != nil {
		t.Fatalf("Expired: %v", err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, string(k))
	}
	return strings.Join(out, ",")
}

func TestApply(t *testing.T) {
	s1, s2, s3 := st(Done, 1, t1), st(Failed, 2, t1.Add(time.Hour)), st(Done, 3, t0)
	for _, tt := range []struct {
		name           string
		batches        []batch
		want           map[string]*State
		absent         []string
		wantCheckpoint int64
	}{
		{
			name:           "new store",
			want:           map[string]*State{},
			absent:         []string{"a"},
			wantCheckpoint: 0,
		},
		{
			name:           "insert",
			batches:        []batch{{[]Change{set("a", s1), set("b", s2)}, 2}},
			want:           map[string]*State{"a": s1, "b": s2},
			wantCheckpoint: 2,
		},
		{
			name:           "overwrite",
			batches:        []batch{{[]Change{set("a", s1)}, 1}, {[]Change{set("a", s2)}, 2}, {[]Change{set("a", s2)}, 3}},
			want:           map[string]*State{"a": s2},
			wantCheckpoint: 3,
		},
		{
			name:           "delete",
			batches:        []batch{{[]Change{set("a", s1), set("b", s2)}, 2}, {[]Change{del("a")}, 3}},
			want:           map[string]*State{"b": s2},
			absent:         []string{"a"},
			wantCheckpoint: 3,
		},
		{
			name:           "delete absent key",
			batches:        []batch{{[]Change{set("a", s1)}, 1}, {[]Change{del("z"), del("z")}, 3}},
			want:           map[string]*State{"a": s1},
			absent:         []string{"z"},
			wantCheckpoint: 3,
		},
		{
			name:           "one key set twice in a batch",
			batches:        []batch{{[]Change{set("a", s1), set("a", s2), set("b", s3)}, 3}},
			want:           map[string]*State{"a": s2, "b": s3},
			wantCheckpoint: 3,
		},
		{
			name:           "set then delete in a batch",
			batches:        []batch{{[]Change{set("a", s1), set("b", s3), del("a")}, 3}},
			want:           map[string]*State{"b": s3},
			absent:         []string{"a"},
			wantCheckpoint: 3,
		},
		{
			name:           "delete then set in a batch",
			batches:        []batch{{[]Change{set("a", s1)}, 1}, {[]Change{del("a"), set("a", s3)}, 3}},
			want:           map[string]*State{"a": s3},
			wantCheckpoint: 3,
		},
		{
			name:           "overwrite, delete, set in a batch",
			batches:        []batch{{[]Change{set("a", s1)}, 1}, {[]Change{set("a", s2), del("a"), set("a", s3), set("a", s1)}, 5}},
			want:           map[string]*State{"a": s1},
			wantCheckpoint: 5,
		},
		{
			name:           "checkpoint only",
			batches:        []batch{{nil, 7}, {nil, 7}},
			want:           map[string]*State{},
			wantCheckpoint: 7,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openMem(t)
			apply(t, s, tt.batches...)
			checkContents(t, s, tt.want, tt.absent...)
			if got := s.Checkpoint(); got != tt.wantCheckpoint {
				t.Errorf("Checkpoint: got %d, want %d", got, tt.wantCheckpoint)
			}
		})
		// The same changes, each carrying the state Get read before the
		// batch, as the processor passes them, give the same store.
		t.Run(tt.name+", states read before", func(t *testing.T) {
			s := openMem(t)
			for _, b := range tt.batches {
				changes := slices.Clone(b.changes)
				for i := range changes {
					st, ok, err := s.Get(changes[i].Key)
					if err != nil {
						t.Fatal(err)
					}
					changes[i].Before = &Read{State: st, OK: ok}
				}
				apply(t, s, batch{changes, b.checkpoint})
			}
			checkContents(t, s, tt.want, tt.absent...)
		})
	}
}

// TestApplyBefore checks that Apply takes a change's Before at its word
// rather than reading the key again, for the first change of a key only.
func TestApplyBefore(t *testing.T) {
	s := openMem(t)
	apply(t, s, batch{[]Change{set("a", st(Done, 1, t1))}, 1})
	absent := &Read{}
	apply(t, s, batch{[]Change{{Key: []byte("a"), State: st(Done, 2, t1), Before: absent}, {Key: []byte("a"), State: st(Done, 3, t1), Before: absent}}, 2})
	// Told "a" was absent, Apply counts it as a new key once: the second
	// change knows it from the first.
	if got := s.Keys(); got != 2 {
		t.Errorf("Keys: got %d, want 2", got)
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		changes []Change
		cp      int64
	}{
		{"checkpoint goes back", []Change{set("b", st(Done, 2, t1))}, 4},
		{"empty key", []Change{set("b", st(Done, 2, t1)), set("", st(Done, 2, t1))}, 6},
		{"unknown status", []Change{set("b", st(Done, 2, t1)), set("c", st(0, 2, t1))}, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openMem(t)
			a := st(Done, 1, t1)
			apply(t, s, batch{[]Change{set("a", a)}, 5})
			if err := s.Apply(tt.changes, tt.cp); err == nil {
				t.Fatalf("Apply: got nil, want an error")
			}
			if got, want := s.Checkpoint(), int64(5); got != want {
				t.Errorf("Checkpoint: got %d, want %d", got, want)
			}
			checkContents(t, s, map[string]*State{"a": a}, "b", "c")
			// The store still works.
			apply(t, s, batch{[]Change{set("b", a)}, 6})
			checkContents(t, s, map[string]*State{"a": a, "b": a})
		})
	}
}

func TestExpired(t *testing.T) {
	e1, e2, e3, e4 := t0, t0.Add(time.Hour), t0.Add(2*time.Hour), t0.Add(3*time.Hour)
	s := openMem(t)
	apply(t, s, batch{[]Change{set("b", st(Done, 1, e3)), set("a", st(Done, 2, e2)), set("c", st(Failed, 3, e1)), set("d", st(Done, 4, e2))}, 4})
	for _, tt := range []struct {
		name  string
		now   time.Time
		limit int
		want  string
	}{
		{"none due", e1.Add(-1), 10, ""},
		{"due at exactly now", e1, 10, "c"},
		{"expiry order, then key order", e2, 10, "c,a,d"},
		{"all", e4, 10, "c,a,d,b"},
		{"limit", e4, 2, "c,a"},
		{"zero limit", e4, 0, ""},
		{"far future", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 10, "c,a,d,b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(t, s, tt.now, tt.limit); got != tt.want {
				t.Errorf("Expired(%v, %d): got %q, want %q", tt.now, tt.limit, got, tt.want)
			}
		})
	}

	// Moving a's expiry to e4 and deleting c leaves no stale index entry.
	apply(t, s, batch{[]Change{set("a", st(Done, 2, e4)), del("c")}, 6})
	for _, tt := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"old expiry of updated key", e2, "d"},
		{"new expiry of updated key", e4, "d,b,a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(t, s, tt.now, 10); got != tt.want {
				t.Errorf("Expired(%v): got %q, want %q", tt.now, got, tt.want)
			}
		})
	}
}

func TestOldestExpiry(t *testing.T) {
	s := openMem(t)
	if _, ok, err := s.OldestExpiry(); ok || err != nil {
		t.Fatalf("OldestExpiry of an empty store: got ok=%v, err=%v, want false, nil", ok, err)
	}
	e1, e2 := t0.Add(time.Hour+time.Nanosecond), t0.Add(2*time.Hour)
	apply(t, s, batch{[]Change{set("b", st(Done, 1, e2)), set("a", st(Done, 2, e1))}, 2})
	for _, tt := range []struct {
		name    string
		changes []Change
		want    time.Time
	}{
		{"earliest of two", nil, e1},
		{"after its key expired and was deleted", []Change{del("a")}, e2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			apply(t, s, batch{tt.changes, s.Checkpoint() + 1})
			got, ok, err := s.OldestExpiry()
			if err != nil || !ok || !got.Equal(tt.want) {
				t.Errorf("OldestExpiry: got %v, %v, %v, want %v, true, nil", got, ok, err, tt.want)
			}
		})
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 7, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	want := map[string]*State{}
	for i := range 20 {
		var changes []Change
		for j := range 100 {
			k := "src:" + strconv.Itoa(i*100+j)
			want[k] = st(Done, int64(i*100+j), t0.Add(time.Duration(j)*time.Minute))
			changes = append(changes, set(k, want[k]))
		}
		apply(t, s, batch{changes, int64(i+1) * 100})
	}
	apply(t, s, batch{[]Change{del("src:0")}, 2001})
	delete(want, "src:0")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	if _, _, err := s.Get([]byte("src:1")); err == nil {
		t.Errorf("Get after Close: got nil, want an error")
	}

	s, err = Open(dir, 7, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if got, want := s.Partition(), int32(7); got != want {
		t.Errorf("Partition: got %d, want %d", got, want)
	}
	if got, want := s.Checkpoint(), int64(2001); got != want {
		t.Errorf("Checkpoint: got %d, want %d", got, want)
	}
	checkContents(t, s, want, "src:0")
	if _, err := os.Stat(filepath.Join(dir, "p7")); err != nil {
		t.Errorf("store directory: %v", err)
	}
}

func TestDestroy(t *testing.T) {
	for _, tt := range []struct {
		name string
		dir  func(t *testing.T) string
		fs   vfs.FS
	}{
		{"os", func(t *testing.T) string { return t.TempDir() }, nil},
		{"mem", func(*testing.T) string { return "data/state" }, vfs.NewMem()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, opts := tt.dir(t), Options{FS: tt.fs}
			if err := Destroy(dir, 3, opts); err != nil {
				t.Fatalf("Destroy of an absent store: %v", err)
			}
			s, err := Open(dir, 3, opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			apply(t, s, batch{[]Change{set("a", st(Done, 1, t1))}, 10})
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := Destroy(dir, 3, opts); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			s, err = Open(dir, 3, opts)
			if err != nil {
				t.Fatalf("Open after Destroy: %v", err)
			}
			defer s.Close()
			if got := s.Checkpoint(); got != 0 {
				t.Errorf("Checkpoint: got %d, want 0", got)
			}
			checkContents(t, s, map[string]*State{}, "a")
		})
	}
}

func TestOpenCorrupt(t *testing.T) {
	garbage := []byte("this is not a pebble file, not at all")
	// each corrupts the closed store in dir (partition 1), whose tables were
	// flushed.
	for _, tt := range []struct {
		name    string
		corrupt func(t *testing.T, dir string)
	}{
		{"garbage MANIFEST", func(t *testing.T, dir string) { overwrite(t, dir, "MANIFEST-*", garbage) }},
		{"garbage OPTIONS", func(t *testing.T, dir string) { overwrite(t, dir, "OPTIONS-*", garbage) }},
		{"garbage table", func(t *testing.T, dir string) { overwrite(t, dir, "*.sst", garbage) }},
		{"missing table", func(t *testing.T, dir string) { overwrite(t, dir, "*.sst", nil) }},
		{"unknown layout", func(t *testing.T, dir string) { rewrite(t, dir, keyFormat, binary.BigEndian.AppendUint64(nil, 99)) }},
		{"previous layout", func(t *testing.T, dir string) {
			rewrite(t, dir, keyFormat, binary.BigEndian.AppendUint64(nil, layoutVersion-1))
		}},
		{"missing layout", func(t *testing.T, dir string) { rewrite(t, dir, keyFormat, nil) }},
		{"short checkpoint", func(t *testing.T, dir string) { rewrite(t, dir, keyCheckpoint, []byte{1}) }},
		{"bad state", func(t *testing.T, dir string) { rewrite(t, dir, []byte("sa"), []byte{1, 2, 3}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, 1, Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			apply(t, s, batch{[]Change{set("a", st(Done, 1, t1))}, 1})
			if err := s.db.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			tt.corrupt(t, dir)

			s, err = Open(dir, 1, Options{})
			if err == nil {
				// Some damage only shows when read.
				_, _, err = s.Get([]byte("a"))
				s.Close()
			}
			if got, want := errors.Is(err, ErrCorrupt), true; got != want {
				t.Fatalf("errors.Is(%v, ErrCorrupt): got %v, want %v", err, got, want)
			}
			// The caller's way out: destroy and rebuild.
			if err := Destroy(dir, 1, Options{}); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			s, err = Open(dir, 1, Options{})
			if err != nil {
				t.Fatalf("Open after Destroy: %v", err)
			}
			defer s.Close()
			checkContents(t, s, map[string]*State{}, "a")
		})
	}
}

// overwrite replaces the content of the files matching pattern in the store
// directory, or removes them when content is nil.
func overwrite(t *testing.T, dir, pattern string, content []byte) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "p1", pattern))
	if err != nil || len(names) == 0 {
		t.Fatalf("no file matches %s: %v", pattern, err)
	}
	for _, name := range names {
		if content == nil {
			err = os.Remove(name)
		} else {
			err = os.WriteFile(name, content, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// rewrite sets (or deletes, when value is nil) a raw key of the store.
func rewrite(t *testing.T, dir string, key, value []byte) {
	t.Helper()
	s, err := Open(dir, 1, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if value == nil {
		err = s.db.Delete(key, nil)
	} else {
		err = s.db.Set(key, value, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenLocked(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("state", 4, Options{FS: fs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	_, err = Open("state", 4, Options{FS: fs})
	if err == nil {
		t.Fatalf("second Open: got nil, want an error")
	}
	if got, want := errors.Is(err, ErrCorrupt), false; got != want {
		t.Errorf("errors.Is(%v, ErrCorrupt): got %v, want %v", err, got, want)
	}
}

// TestWriteError fails every write to the file system, as a full disk does.
// With NoSync the write-ahead log reports the failure when its next block is
// written, so the failing Apply comes a few calls later; that Apply returns
// an error, the checkpoint stays at the last successful Apply, and the store
// refuses every later call.
func TestWriteError(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.ErrInjected.If(errorfs.Writes)}
	s, err := Open("state", 0, Options{FS: errorfs.Wrap(vfs.NewMem(), full)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	apply(t, s, batch{[]Change{set("a", st(Done, 1, t1))}, 1})
	full.On()
	var applyErr error
	last := s.Checkpoint()
	for i := int64(2); i < 10_000 && applyErr == nil; i++ {
		applyErr = s.Apply([]Change{set("k"+strconv.FormatInt(i, 10), st(Done, i, t1))}, i)
		if applyErr == nil {
			last = i
		}
	}
	if applyErr == nil {
		t.Fatalf("Apply: no error after 10,000 calls")
	}
	if got := s.Checkpoint(); got != last {
		t.Errorf("Checkpoint: got %d, want %d", got, last)
	}
	if err := s.Apply(nil, last+10); err == nil {
		t.Errorf("Apply after the failure: got nil, want an error")
	}
	if _, _, err := s.Get([]byte("a")); err == nil {
		t.Errorf("Get after the failure: got nil, want an error")
	}
	if _, err := s.Expired(t1, 10); err == nil {
		t.Errorf("Expired after the failure: got nil, want an error")
	}
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		t.Logf("Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Close: still running after 10s")
	}
}

// TestCrash applies batches without syncing, then opens copies of the file
// system as a crash could leave it. Each copy holds a consistent prefix: the
// state after exactly the batches up to its checkpoint.
func TestCrash(t *testing.T) {
	const batches, perBatch = 60, 100
	// change j of batch i, for checkpoint i+1.
	change := func(i, j int) Change {
		k := "src:" + strconv.Itoa((i*37+j*11)%400)
		if (i+j)%6 == 0 {
			return del(k)
		}
		return set(k, st(Done, int64(i*perBatch+j), t0.Add(time.Duration((i*j)%17)*time.Hour)))
	}
	model := func(checkpoint int64) map[string]*State {
		m := map[string]*State{}
		for i := range int(checkpoint) {
			for j := range perBatch {
				c := change(i, j)
				if c.State == nil {
					delete(m, string(c.Key))
				} else {
					m[string(c.Key)] = c.State
				}
			}
		}
		return m
	}

	mem := vfs.NewCrashableMem()
	s, err := Open("state", 0, Options{FS: mem, MemTableSize: 256 << 10})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	var clones []*vfs.MemFS
	for i := range batches {
		var changes []Change
		for j := range perBatch {
			changes = append(changes, change(i, j))
		}
		apply(t, s, batch{changes, int64(i + 1)})
		if i%10 == 5 {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			clones = append(clones,
				mem.CrashClone(vfs.CrashCloneCfg{}),
				mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng}),
				mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rng}))
		}
	}
	for n, fs := range clones {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			c, err := Open("state", 0, Options{FS: fs})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer c.Close()
			t.Logf("checkpoint %d", c.Checkpoint())
			checkContents(t, c, model(c.Checkpoint()))
		})
	}
}

func TestConcurrentReads(t *testing.T) {
	s := openMem(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := s.Get([]byte("k1")); err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				if _, err := s.Expired(t1, 10); err != nil {
					t.Errorf("Expired: %v", err)
					return
				}
				_, _ = s.Keys(), s.Checkpoint()
			}
		})
	}
	for i := range int64(200) {
		apply(t, s, batch{[]Change{set("k"+strconv.FormatInt(i%10, 10), st(Done, i, t1))}, i + 1})
	}
	close(stop)
	wg.Wait()
	if got, want := s.Keys(), int64(10); got != want {
		t.Errorf("Keys: got %d, want %d", got, want)
	}
}

const benchBatch = 1000

// benchKeys returns n event keys.
func benchKeys(from, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "github:%08x-4c1e-11ef-9a2b-0242ac120002", from+i)
	}
	return keys
}

// BenchmarkApply applies batches of 1,000 new keys to a store on disk.
func BenchmarkApply(b *testing.B) {
	s, err := Open(b.TempDir(), 0, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	state := st(Done, 1, t1)
	changes := make([]Change, benchBatch)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i, k := range benchKeys(n, benchBatch) {
			changes[i] = Change{Key: k, State: state}
		}
		n += benchBatch
		if err := s.Apply(changes, int64(n)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "changes/s")
}

// BenchmarkRestore decodes changelog values and applies them in batches of
// 1,000, as a restore does.
func BenchmarkRestore(b *testing.B) {
	s, err := Open(b.TempDir(), 0, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	value, err := st(Done, 1, t1).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	changes := make([]Change, benchBatch)
	states := make([]State, benchBatch)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i, k := range benchKeys(n, benchBatch) {
			if states[i], err = DecodeChangelog(value); err != nil {
				b.Fatal(err)
			}
			changes[i] = Change{Key: k, State: &states[i]}
		}
		n += benchBatch
		if err := s.Apply(changes, int64(n)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkGet reads random keys of a store on disk holding 100,000 keys
// (1,000,000 keys over 12 partitions), flushed to tables, with the default
// cache.
func BenchmarkGet(b *testing.B) {
	const n = 100_000
	s, err := Open(b.TempDir(), 0, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	keys := benchKeys(0, n)
	for i := 0; i < n; i += benchBatch {
		changes := make([]Change, benchBatch)
		for j := range changes {
			changes[j] = Change{Key: keys[i+j], State: st(Done, int64(i+j), t1)}
		}
		if err := s.Apply(changes, int64(i+benchBatch)); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	misses := benchKeys(n, n)
	for _, bb := range []struct {
		name string
		keys [][]byte
		want bool
	}{
		{"hit", keys, true},
		{"miss", misses, false},
	} {
		b.Run(bb.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				_, ok, err := s.Get(bb.keys[rng.IntN(n)])
				if err != nil || ok != bb.want {
					b.Fatalf("Get: ok=%v, err=%v", ok, err)
				}
			}
		})
	}
}

// TestOpenRefusesAFullDisk: a store is not opened on a file system with
// less room than Pebble needs to open it (to flush what its log holds and
// start a new log): Pebble would wait, unseen and not to be cancelled,
// until there is room. The error says ENOSPC, not ErrCorrupt (destroying
// the store would not help), and the store opens once there is room.
func TestOpenRefusesAFullDisk(t *testing.T) {
	fsys := vfs.NewMem()
	s, err := Open("state", 0, Options{FS: fsys})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	apply(t, s, batch{[]Change{set("a", st(Done, 1, t1))}, 1})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	fsys.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 1 << 30})
	_, err = Open("state", 0, Options{FS: fsys})
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "1048576 bytes free") {
		t.Fatalf("Open with 1 MiB free: got %v, want ENOSPC saying how much is free, not ErrCorrupt", err)
	}

	fsys.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	s, err = Open("state", 0, Options{FS: fsys})
	if err != nil {
		t.Fatalf("Open with room: %v", err)
	}
	defer s.Close()
	checkContents(t, s, map[string]*State{"a": st(Done, 1, t1)})
}
