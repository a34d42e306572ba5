package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/pull"
)

// pullOptions are the flags of events pull.
type pullOptions struct {
	url, token         string
	cursor, cursorFile string
	limit              int
	follow             bool
}

func newEventsPullCommand() *cobra.Command {
	o := &pullOptions{}
	cmd := &cobra.Command{
		Use:   "pull ID --token TOKEN",
		Short: "Read a pull subscription's events, one JSON line each",
		Long: `Pull reads the events of pull subscription ID from the ingest listener
(GET /subscriptions/ID/events with the pull token) and prints each, the
envelope or the subscription's transform result, as one JSON line on
stdout. It is a reference consumer: each request presents the cursor of
the answer before, which acknowledges that answer's events, so an event is
printed at least once and, cursor kept, never skipped.

Without --follow it stops once an answer brings no event. With --follow it
long-polls (30 s per request) until interrupted (Ctrl-C, or SIGTERM), then
exits quietly with status 0, and waits and asks again after a 429, a 503 or a
network error. With --cursor-file it starts from
the cursor in the file (when the file exists) and writes each new cursor
there once the answer's events are printed; otherwise it starts from the
subscription's committed cursor and prints the last cursor on stderr.

An event whose transform failed is printed on stderr, not stdout; the
cursor passes it.`,
		Example: `  hookstream events pull sub_abc --token whsec_... --url http://localhost:8080
  hookstream events pull sub_abc --token whsec_... --follow --cursor-file sub_abc.cursor | ./consume`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runEventsPull(cmd, args[0], o) },
	}
	cmd.Flags().StringVar(&o.url, "url", "http://localhost:8080", "the ingest listener's URL")
	cmd.Flags().StringVar(&o.token, "token", "", "the subscription's pull token (required)")
	cmd.Flags().StringVar(&o.cursor, "cursor", "", "start from this cursor (default: the subscription's committed cursor)")
	cmd.Flags().StringVar(&o.cursorFile, "cursor-file", "", "read the cursor from this file and keep it there")
	cmd.Flags().IntVar(&o.limit, "limit", pull.DefaultLimit, "events per request, 1 to 1000")
	cmd.Flags().BoolVar(&o.follow, "follow", false, "keep long-polling for new events until interrupted")
	return cmd
}

// pulled is a pull answer as the command reads it.
type pulled struct {
	Events []json.RawMessage `json:"events"`
	Cursor string            `json:"cursor"`
	Errors []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"errors"`
	Replayed bool   `json:"replayed"`
	Error    string `json:"error"`
}

// errRetry is an answer worth asking again after a wait.
var errRetry = errors.New("try again")

func runEventsPull(cmd *cobra.Command, id string, o *pullOptions) error {
	if o.token == "" {
		return errors.New("--token is required")
	}
	if o.limit < 1 || o.limit > pull.MaxLimit {
		return fmt.Errorf("--limit: %d is not between 1 and %d", o.limit, pull.MaxLimit)
	}
	base, err := url.Parse(o.url)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return fmt.Errorf("--url: %q is not a URL such as http://localhost:8080", o.url)
	}
	cursor := o.cursor
	if o.cursorFile != "" && cursor == "" {
		b, err := os.ReadFile(o.cursorFile)
		switch {
		case err == nil:
			cursor = strings.TrimSpace(string(b))
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("--cursor-file: %w", err)
		}
	}
	ctx := cmd.Context()
	out := bufio.NewWriter(cmd.OutOrStdout())
	wait := backoff.New(500*time.Millisecond, 30*time.Second)
	client := &http.Client{Timeout: pull.MaxWait + 30*time.Second}
	for {
		a, err := pullOnce(ctx, client, base, id, o, cursor)
		if ctx.Err() != nil {
			return nil // Ctrl-C: the answer in flight is not printed, and its cursor not kept, so it comes again
		}
		if errors.Is(err, errRetry) && o.follow {
			fmt.Fprintf(cmd.ErrOrStderr(), "hookstream: %v; asking again\n", err)
			if !wait.Wait(ctx) {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		wait.Reset()
		if a.Replayed {
			fmt.Fprintln(cmd.ErrOrStderr(), "hookstream: the subscription was replayed: its events come again from where the replay put it")
		}
		for _, e := range a.Events {
			// One line an event: a payload keeps the provider's
			// indentation inside its envelope.
			out.Write(oneLine(e))
			out.WriteByte('\n')
		}
		for _, e := range a.Errors {
			fmt.Fprintf(cmd.ErrOrStderr(), "hookstream: event %s not served: %s\n", e.ID, e.Error)
		}
		if err := out.Flush(); err != nil {
			return err
		}
		cursor = a.Cursor
		if o.cursorFile != "" {
			if err := writeCursor(o.cursorFile, cursor); err != nil {
				return err
			}
		}
		if !o.follow && len(a.Events) == 0 && len(a.Errors) == 0 {
			if o.cursorFile == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "cursor: %s\n", cursor)
			}
			return nil
		}
	}
}

// pullOnce makes one request; its error is errRetry for what deserves
// another try (429, 5xx, the network).
func pullOnce(ctx context.Context, client *http.Client, base *url.URL, id string, o *pullOptions, cursor string) (*pulled, error) {
	q := url.Values{"limit": {strconv.Itoa(o.limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if o.follow {
		q.Set("wait", pull.MaxWait.String())
	}
	u := base.JoinPath("subscriptions", id, "events")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+o.token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRetry, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRetry, err)
	}
	var a pulled
	jerr := json.Unmarshal(body, &a)
	switch {
	case resp.StatusCode == http.StatusOK && jerr == nil:
		return &a, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: %s: %s", errRetry, resp.Status, a.Error)
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s: %s: pass the subscription's pull token with --token (hookstream subscriptions get %s shows it)", resp.Status, a.Error, id)
	case jerr != nil:
		return nil, fmt.Errorf("%s: the answer is not JSON: %.200s", resp.Status, body)
	}
	return nil, fmt.Errorf("%s: %s", resp.Status, a.Error)
}

// writeCursor replaces file's content with cursor, whole or not at all.
func writeCursor(file, cursor string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("--cursor-file: %w", err)
	}
	if _, err := tmp.WriteString(cursor + "\n"); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("--cursor-file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--cursor-file: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("--cursor-file: %w", err)
	}
	return nil
}
