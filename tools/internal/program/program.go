// Package program is the scaffold the programs under tools/ share: the
// command line parsed, a context that an interrupt or SIGTERM ends, the
// exit status and its message on stderr, the log, the flags they have in
// common, and the report printed as indented JSON or as text.
package program

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Main parses the command line and runs run with a context that an
// interrupt or SIGTERM ends. When run returns an error, Main prints
// "name: error" on stderr and exits with 1, or with the status of an
// error from Exit or Usage (printing nothing for Exit's nil error).
func Main(name string, run func(ctx context.Context) error) {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err == nil {
		return
	}
	code, msg := status(name, err)
	if msg != "" {
		fmt.Fprintln(os.Stderr, msg)
	}
	os.Exit(code)
}

// exitError ends Main with code, printing err unless it is nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// Exit is an error that ends Main with code, after printing err when it
// is not nil.
func Exit(code int, err error) error { return &exitError{code: code, err: err} }

// Usage is the error of a command line that makes no sense: Main prints
// it and exits with 2, as the flag package does.
func Usage(format string, args ...any) error { return Exit(2, fmt.Errorf(format, args...)) }

// status is the exit status of a program that failed with err, and the
// line Main prints for it ("" for none).
func status(name string, err error) (int, string) {
	var e *exitError
	if !errors.As(err, &e) {
		return 1, name + ": " + err.Error()
	}
	if e.err == nil {
		return e.code, ""
	}
	return e.code, name + ": " + e.err.Error()
}

// Logger is a text log on stderr of level and above.
func Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// JSONVar defines --json, which asks for the results as JSON, in p.
func JSONVar(p *bool) { flag.BoolVar(p, "json", false, "print the results as JSON") }

// HookstreamVar defines --hookstream, the hookstream binary to measure,
// in p; empty, the program builds ./cmd/hookstream.
func HookstreamVar(p *string) {
	flag.StringVar(p, "hookstream", "", "hookstream binary to measure (default: build ./cmd/hookstream)")
}

// Report writes the result r to w: as indented JSON when asJSON,
// otherwise as text writes it.
func Report(w io.Writer, asJSON bool, r any, text func(io.Writer) error) error {
	if !asJSON {
		return text(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
