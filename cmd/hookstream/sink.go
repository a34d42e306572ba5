package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

func newSinkCommand() *cobra.Command {
	var addr, secret string
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Run a local subscriber that verifies and prints every delivery",
		Long: `Sink is a subscriber endpoint for development: it accepts deliveries on
POST /, checks their Standard Webhooks signature when --secret is given,
prints one line per event (each event of a batch, with the batch id and
its place in it) and answers 204 (401 when the signature does not verify). It answers the
verification request of 'hookstream subscriptions add --verify' with its
challenge.`,
		Example: `  hookstream sink --addr 127.0.0.1:9000 --secret whsec_...`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runSink(cmd, addr, secret) },
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9000", "listen address")
	cmd.Flags().StringVar(&secret, "secret", "", "the subscription's secret, to verify signatures")
	return cmd
}

// runSink serves deliveries on addr, verifying them with secret when it
// is set, until the command's context ends.
func runSink(cmd *cobra.Command, addr, secret string) error {
	var keys [][]byte
	if secret != "" {
		key, err := signature.DecodeSecret(secret)
		if err != nil {
			return fmt.Errorf("--secret: %w", err)
		}
		keys = [][]byte{key}
	}
	out := cmd.OutOrStdout()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: sinkHandler(out, keys)}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	fmt.Fprintf(out, "sink listening on http://%s\n", ln.Addr())
	go func() {
		<-cmd.Context().Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // ending; the listener error below reports anything else
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// sinkHandler verifies each delivery with keys (when any) and prints one
// line per event to out.
func sinkHandler(out io.Writer, keys [][]byte) http.Handler {
	var mu sync.Mutex // one delivery's lines together
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil || r.Method != http.MethodPost {
			http.Error(w, "POST an event", http.StatusBadRequest)
			return
		}
		id := r.Header.Get(signature.HeaderID)
		mu.Lock()
		defer mu.Unlock()
		verdict := "unverified"
		if keys != nil {
			if _, err := signature.VerifyRequest(r.Header, keys, body, time.Now(), 5*time.Minute); err != nil {
				fmt.Fprintf(out, "REJECTED %s: %v\n", id, err)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			verdict = "signature ok"
		}
		now := time.Now().UTC().Format(time.RFC3339)
		var challenge webhook.VerificationRequest
		if json.Unmarshal(body, &challenge) == nil && challenge.Type == webhook.VerificationType {
			fmt.Fprintf(out, "%s verification %s answered (%s)\n", now, id, verdict)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": challenge.Challenge}) // a failed write fails the verification
			return
		}
		envelopes, err := topics.SplitBatch(body)
		if err != nil { // one event
			typ := ""
			if env, err := topics.ParseEnvelope(body); err == nil {
				typ = env.Type
			}
			fmt.Fprintf(out, "%s %s type=%s bytes=%d (%s)\n", now, id, typ, len(body), verdict)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		for i, e := range envelopes {
			eventID, typ := "?", ""
			if env, err := topics.ParseEnvelope(e); err == nil {
				eventID, typ = env.ID, env.Type
			}
			fmt.Fprintf(out, "%s %s type=%s bytes=%d batch %s %d/%d (%s)\n", now, eventID, typ, len(e), id, i+1, len(envelopes), verdict)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
