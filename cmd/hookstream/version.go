package main

import (
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// buildVersion is what --version prints after "hookstream version ": the
// version set with -ldflags, else the module version go stamped (the tag
// of `go install ...@v1.2.0`), then the commit, its time and whether the
// tree was modified, when built from a checkout, and the version of Go.
func buildVersion(ldflags string, bi *debug.BuildInfo) string {
	if bi == nil {
		return ldflags
	}
	v := ldflags
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var about []string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			about = append(about, "commit "+s.Value[:min(len(s.Value), 12)])
		case s.Key == "vcs.time":
			about = append(about, s.Value)
		case s.Key == "vcs.modified" && s.Value == "true":
			about = append(about, "modified")
		}
	}
	about = append(about, bi.GoVersion)
	return v + " (" + strings.Join(about, ", ") + ")"
}
