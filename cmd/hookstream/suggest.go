package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// refuseUnknown makes a mistyped command or flag, under root at any
// depth, an error that names the nearest one: cobra itself refuses an
// unknown command under root only, and prints help with success for
// one under another command.
func refuseUnknown(root *cobra.Command) {
	root.SetFlagErrorFunc(unknownFlag)
	var visit func(*cobra.Command)
	visit = func(c *cobra.Command) {
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = unknownCommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
}

// unknownCommand refuses the arguments of a command that only groups
// others, naming the nearest of them.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if near := nearest(args[0], names); near != "" {
		return fmt.Errorf("unknown command %q for %q; did you mean %q?", args[0], cmd.CommandPath(), near)
	}
	return fmt.Errorf("unknown command %q for %q; run %s --help for its commands", args[0], cmd.CommandPath(), cmd.CommandPath())
}

// unknownFlag is the flag error of every command: an unknown flag names
// the nearest of the command's flags; other errors say where help is.
func unknownFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return fmt.Errorf("%w; run %s --help for its flags", err, cmd.CommandPath())
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if near := nearest(name, names); near != "" {
		return fmt.Errorf("unknown flag --%s for %q; did you mean --%s?", name, cmd.CommandPath(), near)
	}
	return fmt.Errorf("unknown flag --%s for %q; run %s --help for its flags", name, cmd.CommandPath(), cmd.CommandPath())
}

// nearest is the name closest to typed, within two edits and fewer edits
// than typed has characters, or "" when none is.
func nearest(typed string, names []string) string {
	best, bestDist := "", min(3, len(typed))
	for _, n := range names {
		if d := editDistance(typed, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
