package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestSubscriptionBatchFlagsRefused: batch flags out of range are refused
// with one line before any broker is asked.
func TestSubscriptionBatchFlagsRefused(t *testing.T) {
	t.Setenv("HOOKSTREAM_BROKERS", "127.0.0.1:1") // nothing listens: a case that got this far would fail
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "0"},
			"invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "1001"},
			"invalid subscription: batch_max: 1001 is not between 1 and 1000"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "10", "--batch-wait", "11s"},
			"invalid subscription: batch_wait: 11s is not between 0s and 10s"},
		{[]string{"subscriptions", "update", "sub_a", "--batch-max", "0"},
			"invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{[]string{"subscriptions", "update", "sub_a", "--batch-wait", "-1s"},
			"invalid subscription: batch_wait: -1s is not between 0s and 10s"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			root := &cobra.Command{Use: "hookstream", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(newSubscriptionsCommand())
			root.SetArgs(tt.args)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got := ""
			if err := root.ExecuteContext(ctx); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error: got %q, want %q", got, tt.want)
			}
		})
	}
}
