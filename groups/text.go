package groups

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the plan as hookstream replay prints it and the admin
// API gives it in "text": a header, a row per partition (current offset,
// target, records to re-read, notes), the totals, what replaying means
// for this group, and the active members that keep it from executing.
// Whether it was executed is said by the caller.
func (p Plan) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Replay of group %s on %s to %s:\n", p.Group, p.Topic, p.Target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCURRENT\tTARGET\tREREAD\tNOTE")
	var skipped int64
	for _, m := range p.Moves {
		current := "-"
		if m.Current >= 0 {
			current = fmt.Sprint(m.Current)
		}
		var notes []string
		if m.Clamped != "" {
			notes = append(notes, "clamped "+m.Clamped)
		}
		if m.Skip > 0 {
			notes = append(notes, fmt.Sprintf("skips %d", m.Skip))
		}
		skipped += m.Skip
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\n", m.Partition, current, m.Target, m.Reread, strings.Join(notes, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Records to re-read: %d", p.Reread())
	if skipped > 0 {
		fmt.Fprintf(w, ", to skip: %d", skipped)
	}
	fmt.Fprintln(w, ".")
	fmt.Fprintf(w, "What this means: %s.\n", p.Effect)
	var err error
	if len(p.Members) > 0 {
		_, err = fmt.Fprintf(w, "Active members: %s. Executing is refused until they stop.\n", strings.Join(p.Members, ", "))
	}
	return err
}

// Text is WriteText's text.
func (p Plan) Text() string {
	var b strings.Builder
	_ = p.WriteText(&b) // a strings.Builder takes every write
	return b.String()
}
