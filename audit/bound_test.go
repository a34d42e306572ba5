package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/admin"
)

// TestRecordBounded: however long a target, and however many and long
// the fields a body names, a record stays within MaxRecordBytes, and
// what was cut says so.
func TestRecordBounded(t *testing.T) {
	fields := make([]string, 10_000)
	for i := range fields {
		fields[i] = fmt.Sprintf("%0300d", i)
	}
	r := bound(admin.Record{
		// A CLI's actor is named by its machine (cli:<user>@<host>).
		Actor:  admin.Identity{TokenID: "cli", Name: "cli:" + strings.Repeat("n", 1<<20), Role: admin.Operator, Team: strings.Repeat("t", 63)},
		Action: "auth.refused", Target: "GET /api/" + strings.Repeat("x", 1<<20), RequestID: strings.Repeat("r", 24),
		RemoteAddr: strings.Repeat("f", 1000), Status: 401, Fields: fields,
	})
	v, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > MaxRecordBytes {
		t.Errorf("record: %d bytes, want at most %d", len(v), MaxRecordBytes)
	}
	if !strings.HasSuffix(r.Target, truncated) || len(r.Target) > maxTarget+len(truncated) {
		t.Errorf("target: %d bytes ending %q, want at most %d ending %q", len(r.Target), r.Target[len(r.Target)-20:], maxTarget, truncated)
	}
	if last := r.Fields[len(r.Fields)-1]; len(r.Fields) != maxFields+1 || last != fmt.Sprintf("(and %d more)", len(fields)-maxFields) {
		t.Errorf("fields: got %d ending %q, want %d and a count of the rest", len(r.Fields), last, maxFields+1)
	}
	if len(r.Actor.Name) > maxActor+len(truncated) {
		t.Errorf("actor: %d bytes, want at most %d", len(r.Actor.Name), maxActor)
	}
	short := bound(admin.Record{Target: "sub_1", Fields: []string{"url"}})
	if short.Target != "sub_1" || len(short.Fields) != 1 {
		t.Errorf("a short record: got %+v, want it as it was", short)
	}
}

// TestRefusalsAdmittedAcrossASecond: refusals are admitted at most 10 at
// once and 10 a second after, in any span of time: 10 just before a
// second turns and 10 just after are not 20 within 100 ms.
func TestRefusalsAdmittedAcrossASecond(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 950_000_000, time.UTC)
	s := &Service{now: func() time.Time { return at }, refusals: refusalLimiter()}
	admitted := 0
	for _, step := range []time.Duration{0, 100 * time.Millisecond} {
		at = at.Add(step)
		for range 10 {
			if s.admit() {
				admitted++
			}
		}
	}
	if admitted > 11 {
		t.Errorf("refusals admitted within 100 ms across a second: %d, want at most 11 (10, and 10 a second after)", admitted)
	}
}
