package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestLoadSourcesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sources.yaml")
	doc := `
sources:
  github:
    verify: {scheme: github, secret: ${GH_SECRET}}
    event_id: header:X-GitHub-Delivery
  stripe:
    verify: {scheme: stripe, secret: s, tolerance: 2m}
    rate_limit: 100/s
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadSources(path, lookupFrom(map[string]string{"GH_SECRET": "shh"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Sources["github"].Verify.Secret; got != "shh" {
		t.Errorf("expanded secret: got %q, want %q", got, "shh")
	}
	if got := c.Sources["stripe"].Verify.Tolerance; got != 2*time.Minute {
		t.Errorf("tolerance: got %v, want 2m", got)
	}
	if c.AllowUnknown {
		t.Errorf("allow_unknown_sources: got true, want false by default with a file")
	}
}

func TestParseSourcesErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"missing variable", "sources: {a: {verify: {scheme: github, secret: ${NOPE}}}}", "HOOKSTREAM_CONFIG: environment variable NOPE is not set"},
		{"unknown scheme", "sources: {a: {verify: {scheme: md5, secret: x}}}", `sources.a.verify.scheme: unknown scheme "md5"`},
		{"secret required", "sources: {a: {verify: {scheme: stripe}}}", "sources.a.verify.secret: required by scheme stripe"},
		{"header required", "sources: {a: {verify: {scheme: token, secret: x}}}", "sources.a.verify.header: required by scheme token"},
		{"rate", "sources: {a: {rate_limit: fast}}", `sources.a.rate_limit: invalid rate "fast"`},
		{"standard secret", "sources: {a: {verify: {scheme: standard, secret: plain}}}", "sources.a.verify.secret: "},
		{"old standard secret", "sources: {a: {verify: {scheme: standard, secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, old_secrets: [x]}}}", "sources.a.verify.old_secrets[0]: "},
		{"unknown key", "sources: {a: {verfy: {}}}", "field verfy not found"},
		{"bad name", "sources: {'a/b': {}}", "sources.a/b: source names use"},
		{"reserved name", "sources: {hookstream: {}}", "sources.hookstream: reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSources([]byte(tt.doc), lookupFrom(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: got %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in        string
		perSecond float64
		burst     int
	}{
		{"100/s", 100, 100},
		{"60/m", 1, 60},
		{"3600/h", 1, 3600},
	}
	for _, tt := range tests {
		perSecond, burst, err := ParseRate(tt.in)
		if err != nil || perSecond != tt.perSecond || burst != tt.burst {
			t.Errorf("ParseRate(%q): got %v, %d, %v, want %v, %d", tt.in, perSecond, burst, err, tt.perSecond, tt.burst)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	doc := "sources: {a: {verify: {scheme: github}, rate_limit: fast}, b: {verify: {scheme: token, secret: ' x'}, event_id: 'nope:'}}"
	_, err := ParseSources([]byte(doc), lookupFrom(nil))
	if err == nil {
		t.Fatal("got nil error")
	}
	want := []string{
		"HOOKSTREAM_CONFIG: sources.a.verify.secret: required by scheme github",
		`sources.a.rate_limit: invalid rate "fast" (want N/s, N/m or N/h)`,
		"sources.b.verify.header: required by scheme token",
		"sources.b.verify.secret: has leading or trailing white space",
		"sources.b.event_id: ",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("error: got %d lines %q, want %d", len(lines), lines, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: got %q, want it to start with %q", i, lines[i], w)
		}
	}
}

// TestSourcesExpandValuesOnly: ${VAR} expands in values, where it is
// written as the value itself: a comment may name a variable that is not
// set, and a value of a variable is that value whatever it holds (a secret
// with a newline and a colon adds no key).
func TestSourcesExpandValuesOnly(t *testing.T) {
	doc := `
# The secret comes from ${GITHUB_WEBHOOK_SECRET}; set it before starting.
sources:
  github:
    verify: {scheme: github, secret: "${GH_SECRET}"}  # not ${ALSO_UNSET}
`
	secret := "a: b\n    allow_unknown_sources: true"
	s, err := ParseSources([]byte(doc), lookupFrom(map[string]string{"GH_SECRET": secret}))
	if err != nil {
		t.Fatalf("a comment naming unset variables: %v", err)
	}
	if got := s.Sources["github"].Verify.Secret; got != secret {
		t.Errorf("secret: got %q, want the variable's value %q", got, secret)
	}
	if s.AllowUnknown {
		t.Error("a variable's value added a key: allow_unknown_sources is true")
	}
}
