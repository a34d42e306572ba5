package groups

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Amount writes a count of u as hookstream shows it: "12" for 12
// events, "≤ 24 offsets" for 24 offsets, an upper bound of the events.
func Amount(n int64, u Unit) string {
	if u == Offsets && n > 0 {
		return fmt.Sprintf("≤ %d offsets", n)
	}
	return fmt.Sprint(n)
}

// total writes a plan's total count in a sentence: "9", or "at most 48
// (counted in offsets: too many to read and count)".
func total(n int64, u Unit) string {
	if u == Offsets && n > 0 {
		return fmt.Sprintf("at most %d (counted in offsets: too many to read and count)", n)
	}
	return fmt.Sprint(n)
}

// LagText is the partition's lag as the lag command and the console show
// it (Amount).
func (p PartitionLag) LagText() string { return Amount(p.Lag, p.Unit) }

// TotalText is the group's total lag as the lag command and the console
// show it (Amount).
func (g GroupLag) TotalText() string { return Amount(g.Total, g.Unit) }

// WriteText writes the plan as hookstream replay prints it and the admin
// API gives it in "text": a header, a row per partition (current offset,
// target, records to re-read, notes), the totals, what replaying means
// for this group, and the active members that keep it from executing.
// Counts in offsets are marked as upper bounds. Whether it was executed
// is said by the caller.
func (p Plan) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Replay of group %s on %s to %s:\n", p.Group, p.Topic, p.Target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCURRENT\tTARGET\tREREAD\tNOTE")
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
			notes = append(notes, "skips "+Amount(m.Skip, m.Unit))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", m.Partition, current, m.Target, Amount(m.Reread, m.Unit), strings.Join(notes, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Records to re-read: %s", total(p.Reread()))
	if n, u := p.Skipped(); n > 0 {
		fmt.Fprintf(w, ", to skip: %s", total(n, u))
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
