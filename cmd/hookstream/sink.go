package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

func newSinkCommand() *cobra.Command {
	var (
		addr    string
		secrets []string
	)
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Run a local subscriber that verifies and prints every delivery",
		Long: `Sink is a subscriber endpoint for development: it accepts deliveries on
POST /, checks their Standard Webhooks signature when --secret is given,
prints one line per event (each event of a batch, with the batch id and
its place in it) and answers 204 (401 when the signature does not verify). It answers the
verification request of 'hookstream subscriptions add --verify' with its
challenge.

Repeat --secret to accept any of several, such as the old and the new
secret of a rotation: each line says which one verified the delivery, by
its last characters.`,
		Example: `  hookstream sink --addr 127.0.0.1:9000 --secret whsec_...

  # during a rotation (subscriptions rotate-secret), the old and the new secret
  hookstream sink --secret whsec_old... --secret whsec_new...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSink(cmd, addr, secrets) },
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9000", "listen address")
	cmd.Flags().StringArrayVar(&secrets, "secret", nil, "a secret of the subscription, to verify signatures (repeat for several)")
	return cmd
}

// sinkKey is a key the sink verifies with, and how it names it: the last
// characters of its secret, never the whole.
type sinkKey struct {
	key    []byte
	ending string
}

// decodeSinkSecrets decodes the secrets of --secret.
func decodeSinkSecrets(secrets []string) ([]sinkKey, error) {
	keys := make([]sinkKey, 0, len(secrets))
	for i, s := range secrets {
		key, err := signature.DecodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("--secret #%d: %w", i+1, err)
		}
		keys = append(keys, sinkKey{key: key, ending: "…" + s[max(len(s)-4, 0):]})
	}
	return keys, nil
}

// runSink serves deliveries on addr, verifying them with secrets when
// there are any, until the command's context ends.
func runSink(cmd *cobra.Command, addr string, secrets []string) error {
	keys, err := decodeSinkSecrets(secrets)
	if err != nil {
		return err
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

// verify checks the signature of a delivery with each key in turn and
// returns the verdict its lines end with, or why it is refused.
func verify(keys []sinkKey, h http.Header, body []byte) (string, error) {
	if len(keys) == 0 {
		return "unverified", nil
	}
	endings := make([]string, len(keys))
	for i, k := range keys {
		_, err := signature.VerifyRequest(h, [][]byte{k.key}, body, time.Now(), 5*time.Minute)
		switch {
		case err == nil:
			return "signature ok with the secret ending " + k.ending, nil
		case !errors.Is(err, signature.ErrInvalidSignature):
			return "", err // the timestamp: no key would do
		}
		endings[i] = k.ending
	}
	which := "the secret ending " + endings[0]
	if len(keys) > 1 {
		which = fmt.Sprintf("the secrets ending %s (%d tried)", strings.Join(endings, ", "), len(keys))
	}
	return "", fmt.Errorf("signature did not verify with %s; pass the subscription's current secret with --secret (hookstream subscriptions get ID shows it)", which)
}

// sinkHandler verifies each delivery with keys (when any) and prints one
// line per event to out.
func sinkHandler(out io.Writer, keys []sinkKey) http.Handler {
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
		verdict, err := verify(keys, r.Header, body)
		if err != nil {
			fmt.Fprintf(out, "REJECTED %s: %v\n", id, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
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
