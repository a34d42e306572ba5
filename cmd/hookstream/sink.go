package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

func newSinkCommand() *cobra.Command {
	var addr, secret string
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Run a local subscriber that verifies and prints every delivery",
		Long: `Sink is a subscriber endpoint for development: it accepts deliveries on
POST /, checks their Standard Webhooks signature when --secret is given,
prints one line per delivery and answers 204 (401 when the signature does
not verify).`,
		Example: `  hookstream sink --addr 127.0.0.1:9000 --secret whsec_...`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var keys [][]byte
			if secret != "" {
				key, err := signature.DecodeSecret(secret)
				if err != nil {
					return fmt.Errorf("--secret: %w", err)
				}
				keys = [][]byte{key}
			}
			out := cmd.OutOrStdout()
			srv := &http.Server{
				ReadHeaderTimeout: 10 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
					if err != nil || r.Method != http.MethodPost {
						http.Error(w, "POST an event", http.StatusBadRequest)
						return
					}
					id := r.Header.Get(signature.HeaderID)
					verdict := "unverified"
					if keys != nil {
						if _, err := signature.VerifyRequest(r.Header, keys, body, time.Now(), 5*time.Minute); err != nil {
							fmt.Fprintf(out, "REJECTED %s: %v\n", id, err)
							w.WriteHeader(http.StatusUnauthorized)
							return
						}
						verdict = "signature ok"
					}
					typ := ""
					if env, err := topics.ParseEnvelope(body); err == nil {
						typ = env.Type
					}
					fmt.Fprintf(out, "%s %s type=%s bytes=%d (%s)\n", time.Now().UTC().Format(time.RFC3339), id, typ, len(body), verdict)
					w.WriteHeader(http.StatusNoContent)
				}),
			}
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
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9000", "listen address")
	cmd.Flags().StringVar(&secret, "secret", "", "the subscription's secret, to verify signatures")
	return cmd
}
