package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/deadletter"
)

// TestEmptyListingsSayNone checks that a table with no rows says so
// instead of printing a bare header, and that JSON stays an empty list.
func TestEmptyListingsSayNone(t *testing.T) {
	tests := []struct {
		name, output, want string
		print              func(w *bytes.Buffer, output string) error
	}{
		{"subscriptions", "table", "no subscriptions\n", func(w *bytes.Buffer, o string) error { return printSubscriptions(w, o, nil, false) }},
		{"subscriptions json", "json", "[]\n", func(w *bytes.Buffer, o string) error { return printSubscriptions(w, o, nil, false) }},
		{"dead letters", "table", "no dead letters\n", func(w *bytes.Buffer, o string) error { return printLetters(w, o, nil) }},
		{"dead letters json", "json", "[]\n", func(w *bytes.Buffer, o string) error { return printLetters(w, o, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.print(&b, tt.output); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}

// TestShowLetterTruncatesBody checks that dlq show prints the start of a
// large body with a note saying how to see it all, and all of it with
// --full.
func TestShowLetterTruncatesBody(t *testing.T) {
	body := strings.Repeat("x", 1<<20)
	l := deadletter.Letter{Kind: deadletter.Processor, Value: []byte(body)}

	var b bytes.Buffer
	if err := printLetter(&b, "table", "hookstream.dlq", l, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if len(out) > 2*dlqShowBytes {
		t.Errorf("table output of a 1 MiB body: got %d bytes, want at most %d", len(out), 2*dlqShowBytes)
	}
	if want := "(first 4096 of 1048576 bytes; --full prints it all)"; !strings.Contains(out, want) {
		t.Errorf("output does not say the body was cut (%q):\n%s", want, out[len(out)-200:])
	}

	b.Reset()
	if err := printLetter(&b, "table", "hookstream.dlq", l, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), body) {
		t.Errorf("--full: the whole body is not printed")
	}
}

// TestCommandsTakeOnlyTheirFlags checks that each command lists the
// settings it uses, and none that would do nothing for it.
func TestCommandsTakeOnlyTheirFlags(t *testing.T) {
	cluster := []string{"brokers", "embedded-addr", "data-dir", "topic-prefix", "log-level"}
	tests := []struct {
		path      []string
		want, not []string
	}{
		{[]string{"run"}, append([]string{"partitions", "replication-factor", "max-body", "admin-token", "log-format", "http-addr"}, cluster...), nil},
		{[]string{"topics", "create"}, append([]string{"partitions", "replication-factor", "max-body"}, cluster...), []string{"admin-token", "log-format", "http-addr"}},
		{[]string{"topics", "describe"}, cluster, []string{"partitions", "replication-factor", "admin-token", "log-format"}},
		{[]string{"subscriptions", "list"}, append([]string{"admin-addr", "admin-token"}, cluster...), []string{"partitions", "log-format"}},
		{[]string{"lag"}, cluster, []string{"partitions", "replication-factor", "admin-token", "log-format", "max-body"}},
		{[]string{"replay"}, cluster, []string{"partitions", "admin-token", "log-format"}},
		{[]string{"dlq", "show"}, cluster, []string{"partitions", "admin-token", "log-format"}},
		{[]string{"sink"}, nil, append([]string{"partitions", "admin-token", "log-format"}, cluster...)},
		{[]string{"bench"}, nil, append([]string{"partitions", "admin-token", "log-format"}, cluster...)},
	}
	root := newRootCommand()
	for _, tt := range tests {
		t.Run(strings.Join(tt.path, " "), func(t *testing.T) {
			cmd, _, err := root.Find(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.want {
				if cmd.Flags().Lookup(f) == nil && cmd.InheritedFlags().Lookup(f) == nil {
					t.Errorf("--%s: missing", f)
				}
			}
			for _, f := range tt.not {
				if cmd.Flags().Lookup(f) != nil || cmd.InheritedFlags().Lookup(f) != nil {
					t.Errorf("--%s: listed, but the command does not use it", f)
				}
			}
		})
	}
}

// TestShowLetterWithoutStatus: a delivery letter whose last attempt got
// no HTTP status (a timeout, a refused connection) shows "-" for it, not
// a status 0 no server sent; the queue is named by the word --dlq takes.
func TestShowLetterWithoutStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{0, "last status   -\n"},
		{503, "last status   503\n"},
	} {
		l := deadletter.Letter{Kind: deadletter.Delivery, Subscription: "sub_abc", Attempts: 8, LastStatus: tc.status, Value: []byte("{}")}
		var b bytes.Buffer
		if err := printLetter(&b, "table", "hookstream.delivery-dlq", l, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) || !strings.Contains(b.String(), "queue         delivery (hookstream.delivery-dlq)\n") {
			t.Errorf("status %d: got\n%s\nwant a line %q and the queue named delivery", tc.status, b.String(), tc.want)
		}
	}
}
