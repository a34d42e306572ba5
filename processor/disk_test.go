package processor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
)

// fullDisk is a file system whose writes fail with ENOSPC while it is full.
type fullDisk struct{ full atomic.Bool }

func (d *fullDisk) MaybeError(op errorfs.Op) error {
	if d.full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
		return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
	}
	return nil
}

func (d *fullDisk) String() string { return "full disk" }

// TestFullDiskStopsAndRecovers: the disk of a processor's state stores
// fills up mid-stream. Pebble cannot go on after its log failed, and the
// store's directory stays locked while the process lives, so the
// processor says why (the store-error counter, a log line naming the full
// disk) and Run ends with an error wrapping statestore.ErrAbandoned, for
// the process to be restarted. Restarted while the disk is still full it
// is not ready and says why; once the disk is freed it restores its
// stores, and every event, those sent during the outage and repeats of
// earlier ones included, is on the events topic exactly once.
func TestFullDiskStopsAndRecovers(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	disk := &fullDisk{}
	dir := t.TempDir()
	store := statestore.Options{FS: errorfs.Wrap(vfs.Default, disk)}
	log, logs := kafkatest.CaptureLogs(t)
	first := start(t, env, options{name: "a", stateDir: dir, log: log, store: store})
	produceEvents(t, env, cl, 0, 20)
	waitEvents(t, env, 20, time.Minute)

	// Pebble finds that a write of its log failed at the first write
	// after it handed over a 32 KiB block of it: events with long ids keep
	// coming, with repeats of earlier ones, until the processor stops.
	disk.full.Store(true)
	sent := 20
	var runErr error
	kafkatest.WaitFor(t, 2*time.Minute, func() error {
		select {
		case runErr = <-first.done:
			first.stopped.Do(func() {}) // Run has returned
			return nil
		default:
		}
		var recs []*kgo.Record
		for i := range 20 {
			recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d-%s", sent+i, strings.Repeat("x", 190)), `{}`),
				ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
		}
		produce(t, cl, recs...)
		sent += 20
		return errors.New("the processor still runs on a full disk")
	})
	if !errors.Is(runErr, statestore.ErrAbandoned) || !strings.Contains(runErr.Error(), "no space left on device") {
		t.Errorf("Run on a full disk: got %v, want an error wrapping statestore.ErrAbandoned that names the full disk", runErr)
	}
	if n := first.metric("hookstream_processor_store_errors_total", "", ""); n < 1 {
		t.Errorf("store errors: got %v, want at least 1", n)
	}
	if lines := logs.Lines("state store failed; partition paused until its store is restored"); len(lines) == 0 ||
		!strings.Contains(fmt.Sprint(lines[0]["err"]), "no space left on device") {
		t.Errorf("logs: got %v, want the store failure naming the full disk", lines)
	}
	exactlyOnce(t, events(t, env), len(events(t, env)), 1) // whatever went out before it stopped, once

	// Restarted on the full disk (on a copy of its directory: this
	// process still holds the abandoned store's lock, a new one would
	// not): not ready, and says why.
	restarted := t.TempDir()
	if err := os.CopyFS(restarted, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	second := start(t, env, options{name: "a", stateDir: restarted, log: log, store: store})
	kafkatest.WaitFor(t, time.Minute, func() error {
		if n := second.metric("hookstream_processor_partitions_restoring", "", ""); n < 1 {
			return fmt.Errorf("partitions restoring: %v, want at least 1", n)
		}
		if ready, _ := second.p.Ready(context.Background()); ready {
			return errors.New("ready with stores that cannot be written")
		}
		if lines := logs.Lines("restore failed; retrying"); len(lines) == 0 ||
			!strings.Contains(fmt.Sprint(lines[len(lines)-1]["err"]), "no space left on device") {
			return fmt.Errorf("no failed restore naming the full disk: %v", lines)
		}
		return nil
	})

	disk.full.Store(false)
	exactlyOnce(t, waitEvents(t, env, sent, 2*time.Minute), sent, 1)
	kafkatest.WaitFor(t, time.Minute, func() error {
		if ready, detail := second.p.Ready(context.Background()); !ready {
			return fmt.Errorf("not ready once the disk was freed: %v", detail)
		}
		return nil
	})
}
