package expr

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hookstream/hookstream/topics"
)

// githubPush is a GitHub push event of the size GitHub sends: 20 commits
// (the most a push payload lists) and a full repository object, about 25 KB.
func githubPush(b testing.TB) *topics.Envelope {
	repo := map[string]any{"id": 1296269, "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5", "name": "hello-world",
		"full_name": "octocat/hello-world", "private": false, "fork": false, "size": 108, "stargazers_count": 80,
		"watchers_count": 80, "language": "Go", "has_issues": true, "forks_count": 9, "open_issues_count": 0,
		"default_branch": "main", "master_branch": "main", "topics": []string{"octocat", "api", "webhooks"},
		"owner": map[string]any{"login": "octocat", "id": 1, "type": "User", "site_admin": false}}
	for _, u := range []string{"html", "forks", "keys", "collaborators", "teams", "hooks", "issue_events", "events",
		"assignees", "branches", "tags", "blobs", "git_tags", "git_refs", "trees", "statuses", "languages",
		"stargazers", "contributors", "subscribers", "subscription", "commits", "git_commits", "comments",
		"issue_comment", "contents", "compare", "merges", "archive", "downloads", "issues", "pulls", "milestones",
		"notifications", "labels", "releases", "deployments", "git", "ssh", "clone", "svn"} {
		repo[u+"_url"] = "https://api.github.com/repos/octocat/hello-world/" + u + "{/sha}"
	}
	commits := make([]map[string]any, 20)
	for i := range commits {
		commits[i] = map[string]any{
			"id": fmt.Sprintf("%040x", i*7919), "tree_id": fmt.Sprintf("%040x", i*104729), "distinct": true,
			"message":   fmt.Sprintf("Change %d: refactor the dispatcher's retry loop so that a slow subscriber never holds up the others\n\nThe loop now waits on the schedule.", i),
			"timestamp": "2024-05-01T10:00:00Z", "url": fmt.Sprintf("https://github.com/octocat/hello-world/commit/%040x", i*7919),
			"author":    map[string]any{"name": "Mona Lisa", "email": "mona@github.com", "username": "mona"},
			"committer": map[string]any{"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"},
			"added":     []string{fmt.Sprintf("dispatch/retry_%d.go", i)}, "removed": []string{},
			"modified": []string{"dispatch/dispatcher.go", "dispatch/worker.go", "README.md"},
		}
	}
	body, err := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "before": fmt.Sprintf("%040x", 1), "after": fmt.Sprintf("%040x", 19*7919),
		"repository": repo, "pusher": map[string]any{"name": "mona", "email": "mona@github.com"},
		"sender":  map[string]any{"login": "mona", "id": 2, "type": "User", "site_admin": false},
		"created": false, "deleted": false, "forced": false, "base_ref": nil,
		"compare": "https://github.com/octocat/hello-world/compare/000000000001...0000000000000000000000000000000000024d5b",
		"commits": commits, "head_commit": commits[19],
	})
	if err != nil {
		b.Fatal(err)
	}
	return &topics.Envelope{
		ID: "github:72d3162e-cc78-11e3-81ab-4c9367dc0958", Source: "github", EventID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		Type: "push", ReceivedAt: time.Date(2024, 5, 1, 10, 6, 0, 0, time.UTC), ContentType: "application/json",
		Headers: map[string]string{"x-github-event": "push", "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		Data:    body,
	}
}

const (
	benchFilter    = `source == "github" && headers["x-github-event"] == "push" && data.ref == "refs/heads/main" && data.commits.exists(c, c.modified.exists(f, f.startsWith("dispatch/")))`
	benchTransform = `{"text": "<" + data.compare + "|" + string(size(data.commits)) + " new commits> pushed to " + data.repository.full_name + " by " + data.pusher.name,
	  "blocks": data.commits.map(c, {"type": "section", "text": {"type": "mrkdwn", "text": "<" + c.url + "|" + c.id + "> " + c.message + " - " + c.author.name}})}`
)

// BenchmarkFilter: a typical filter on a GitHub push. "shared" is one
// more subscription's evaluation of an event (the body already parsed),
// "new" an event's first (NewInput and the parse included).
func BenchmarkFilter(b *testing.B) {
	env := githubPush(b)
	f, err := CompileFilter(benchFilter)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("payload %d bytes", len(env.Data))
	b.Run("shared", func(b *testing.B) {
		in := NewInput(env)
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := f.Match(in); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := f.Match(NewInput(env)); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkTransform: a Slack message made of a GitHub push, as
// BenchmarkFilter.
func BenchmarkTransform(b *testing.B) {
	env := githubPush(b)
	tr, err := CompileTransform(benchTransform)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("shared", func(b *testing.B) {
		in := NewInput(env)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tr.Apply(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tr.Apply(NewInput(env)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
