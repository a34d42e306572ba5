package console_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

var tags = regexp.MustCompile(`<[^>]*>`)

// text is what a reader sees of some HTML: its text, spaces collapsed.
func text(h string) string {
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(h, " "))), " ")
}

// TestGroupsPageFoldsPartitions: the groups page shows each group on one
// line, its lag in events (in offsets, as an upper bound, past what is
// read to count), and its partitions folded under it.
func TestGroupsPageFoldsPartitions(t *testing.T) {
	t.Parallel()
	h := serve(t, options{token: token})
	names := h.env.Names
	ingest, group := string(names.Ingest), string(names.ProcessorGroup())
	h.env.Transact(t, names.Ingest, 0, 5, 3, 100)     // records 0-2 marker 3, ..., 16-18 marker 19
	h.env.Transact(t, names.Ingest, 1, 24, 1, 60<<10) // 1.4 MiB: past what lag reads to count
	var at kadm.Offsets
	at.Add(kadm.Offset{Topic: ingest, Partition: 0, At: 11, LeaderEpoch: -1})
	at.Add(kadm.Offset{Topic: ingest, Partition: 1, At: 46, LeaderEpoch: -1}) // the last record (46), its marker at 47
	if err := h.env.Admin(t).CommitAllOffsets(context.Background(), group, at); err != nil {
		t.Fatalf("commit: %v", err)
	}
	b := h.browser(t)
	b.signIn()
	page := b.get("/ui/groups")
	if page.status != http.StatusOK {
		t.Fatalf("GET /ui/groups: %d %s", page.status, page.body)
	}
	fold := regexp.MustCompile(`(?s)<details([^>]*)>\s*<summary>(.*?)</summary>(.*?)</details>`)
	folds := fold.FindAllStringSubmatch(page.body, -1)
	var processor []string
	for _, f := range folds {
		if strings.Contains(f[2], group) {
			processor = f
		}
	}
	if processor == nil {
		t.Fatalf("groups page: no folded line for %s in\n%s", group, page.body)
	}
	if strings.Contains(processor[1], "open") {
		t.Errorf("the processor's partitions are open; want them folded")
	}
	if got, want := text(processor[2]), group+" · Empty · 0 members · lag 7 events · Plan a replay of processor"; got != want {
		t.Errorf("the processor's line: got %q, want %q", got, want)
	}
	inside := text(processor[3])
	for _, want := range []string{ingest + " 0 11 20 6 none", ingest + " 1 46 48 1 none"} {
		if !strings.Contains(inside, want) {
			t.Errorf("the processor's partitions: got %q, want a row %q", inside, want)
		}
	}

	// Further behind than the page reads to count: offsets, an upper bound.
	at = kadm.Offsets{}
	at.Add(kadm.Offset{Topic: ingest, Partition: 1, At: 0, LeaderEpoch: -1})
	if err := h.env.Admin(t).CommitAllOffsets(context.Background(), group, at); err != nil {
		t.Fatalf("commit: %v", err)
	}
	page = b.get("/ui/groups")
	for _, f := range fold.FindAllStringSubmatch(page.body, -1) {
		if strings.Contains(f[2], group) {
			if got, want := text(f[2]), group+" · Empty · 0 members · lag ≤ 54 offsets · Plan a replay of processor"; got != want {
				t.Errorf("the processor's line past the bound: got %q, want %q", got, want)
			}
			if inside := text(f[3]); !strings.Contains(inside, ingest+" 1 0 48 ≤ 48 offsets none") {
				t.Errorf("the processor's partitions past the bound: got %q, want partition 1 at ≤ 48 offsets", inside)
			}
		}
	}
}
