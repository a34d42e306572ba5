package main

import (
	"debug/buildinfo"
	"runtime/debug"
	"strings"
	"testing"
)

// TestMistypedCommandsSuggest: a mistyped command or flag, at any depth,
// fails with a non-zero exit and names the nearest one, instead of
// printing help as if it had worked.
func TestMistypedCommandsSuggest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"subs", "lst"}, []string{`unknown command "lst" for "hookstream subscriptions"`, `did you mean "list"?`}},
		{[]string{"subscriptons", "list"}, []string{`unknown command "subscriptons" for "hookstream"`, `did you mean "subscriptions"?`}},
		{[]string{"dlq", "shwo"}, []string{`unknown command "shwo" for "hookstream dlq"`, `did you mean "show"?`}},
		{[]string{"topics", "nosuch"}, []string{`unknown command "nosuch" for "hookstream topics"`, "hookstream topics --help"}},
		{[]string{"subscriptions", "add", "--uri", "http://127.0.0.1:9000"}, []string{`unknown flag --uri for "hookstream subscriptions add"`, "did you mean --url?"}},
		{[]string{"sink", "--adr", "127.0.0.1:0"}, []string{`unknown flag --adr for "hookstream sink"`, "did you mean --addr?"}},
		{[]string{"run", "--http-adr", ":0"}, []string{`unknown flag --http-adr for "hookstream run"`, "did you mean --http-addr?"}},
		{[]string{"lag", "--zzzzzz"}, []string{`unknown flag --zzzzzz for "hookstream lag"`, "hookstream lag --help"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := lagReplayRun(t, nil, tc.args...)
			if code == 0 {
				t.Errorf("exit code: got 0, want non-zero (stdout %q)", stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr: got %q, want it to contain %q", stderr, w)
				}
			}
		})
	}
}

// TestVersionNamesTheBuild: --version names what go stamped into the
// binary: the module version `go install` gives it, the commit, its time
// and whether the tree was modified when built from a checkout, and the
// version of Go; a version set with -ldflags wins.
func TestVersionNamesTheBuild(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := lagReplayRun(t, nil, "--version")
	if code != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, stderr)
	}
	bi, err := buildinfo.ReadFile(hookstreamBin)
	if err != nil {
		t.Fatal(err)
	}
	if want := "hookstream version " + buildVersion("dev", bi) + "\n"; stdout != want {
		t.Errorf("--version: got %q, want %q", stdout, want)
	}

	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-03-01T10:00:00Z"}}
	for _, tc := range []struct {
		name, ldflags string
		bi            *debug.BuildInfo
		want          string
	}{
		{"go install at a tag", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}}, "v1.2.0 (go1.26.8)"},
		{"a checkout", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20260301100000-0123456789ab"}, Settings: vcs},
			"v0.0.0-20260301100000-0123456789ab (commit 0123456789ab, 2026-03-01T10:00:00Z, go1.26.8)"},
		{"a modified checkout", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "true"})},
			"dev (commit 0123456789ab, 2026-03-01T10:00:00Z, modified, go1.26.8)"},
		{"-ldflags", "v1.3.0", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "v1.3.0 (commit 0123456789ab, 2026-03-01T10:00:00Z, go1.26.8)"},
		{"no build information", "dev", nil, "dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildVersion(tc.ldflags, tc.bi); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunHelpSaysHowToOpenIngest: run's help says that on the embedded
// broker the ingest listener takes webhooks from this host only, and how
// to take them from others.
func TestRunHelpSaysHowToOpenIngest(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := lagReplayRun(t, nil, "run", "--help")
	if code != 0 {
		t.Fatalf("run --help: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"from this host only\n(127.0.0.1:8080)", "HOOKSTREAM_HTTP_ADDR=0.0.0.0:8080 (or --http-addr)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("run --help: got %q, want it to contain %q", stdout, want)
		}
	}
}
