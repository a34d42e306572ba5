package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/topics"
)

// pushBody is a GitHub push payload, shortened.
const pushBody = `{
  "ref": "refs/heads/main",
  "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
  "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
  "repository": {"id": 1296269, "name": "hello-world", "full_name": "octocat/hello-world", "private": false,
    "owner": {"login": "octocat", "id": 1}, "html_url": "https://github.com/octocat/hello-world",
    "stargazers_count": 80, "size": 108.5, "topics": ["octocat", "api"]},
  "pusher": {"name": "octocat", "email": "octocat@github.com"},
  "sender": {"login": "octocat", "id": 1, "type": "User"},
  "created": false, "deleted": false, "forced": false,
  "commits": [
    {"id": "0d1a26e6", "message": "Fix the readme", "timestamp": "2024-05-01T10:00:00Z",
     "author": {"name": "Mona", "email": "mona@github.com", "username": "mona"},
     "added": [], "removed": [], "modified": ["README.md"]},
    {"id": "6113728f", "message": "deploy: production", "timestamp": "2024-05-01T10:05:00Z",
     "author": {"name": "Octo Cat", "email": "octocat@github.com", "username": "octocat"},
     "added": ["app.go"], "removed": [], "modified": []}
  ],
  "head_commit": {"id": "6113728f", "message": "deploy: production"}
}`

func testEnvelope() *topics.Envelope {
	return &topics.Envelope{
		ID:          "github:delivery-1",
		Source:      "github",
		EventID:     "delivery-1",
		Type:        "push",
		ReceivedAt:  time.Date(2024, 5, 1, 10, 6, 0, 0, time.UTC),
		Replay:      2,
		ContentType: "application/json",
		Headers:     map[string]string{"x-github-event": "push", "x-github-delivery": "delivery-1"},
		Data:        json.RawMessage(pushBody),
	}
}

func formEnvelope() *topics.Envelope {
	e := &topics.Envelope{ID: "slack:cmd-1", Source: "slack", EventID: "cmd-1", Type: "command", ReceivedAt: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)}
	e.SetBody([]byte("command=%2Fdeploy&text=prod&user_name=mona&channel=a&channel=b"), "application/x-www-form-urlencoded", false)
	return e
}

func match(t *testing.T, src string, env *topics.Envelope) (bool, error) {
	t.Helper()
	f, err := CompileFilter(src)
	if err != nil {
		t.Fatalf("CompileFilter(%q): %v", src, err)
	}
	if f.String() != src {
		t.Errorf("String() = %q, want %q", f.String(), src)
	}
	return f.Match(NewInput(env))
}

func TestFilterEnvironment(t *testing.T) {
	text := &topics.Envelope{ID: "x:1", Source: "x", EventID: "1", Type: "t", DataBase64: []byte("not json")}
	for _, tc := range []struct {
		src  string
		env  *topics.Envelope
		want bool
	}{
		{`id == "github:delivery-1"`, testEnvelope(), true},
		{`source == "github"`, testEnvelope(), true},
		{`source == "stripe"`, testEnvelope(), false},
		{`event_id == "delivery-1"`, testEnvelope(), true},
		{`type == "push"`, testEnvelope(), true},
		{`type.startsWith("pu")`, testEnvelope(), true},
		{`replay == 2`, testEnvelope(), true},
		{`replay == 0`, text, true},
		{`received_at > timestamp("2020-01-01T00:00:00Z")`, testEnvelope(), true},
		{`received_at < timestamp("2024-05-01T10:05:59Z")`, testEnvelope(), false},
		{`received_at.getHours() == 10`, testEnvelope(), true},
		{`received_at - timestamp(data.commits[0].timestamp) < duration("10m")`, testEnvelope(), true},
		{`headers["x-github-event"] == "push"`, testEnvelope(), true},
		{`"x-github-delivery" in headers`, testEnvelope(), true},
		{`"x-hub-signature" in headers`, testEnvelope(), false},
		{`has(headers.x)`, text, false},
		{`size(headers) == 0`, text, true},
		{`source == "github" && data.ref == "refs/heads/main"`, testEnvelope(), true},
		{`data.repository.full_name == "octocat/hello-world"`, testEnvelope(), true},
		{`has(data.repository)`, testEnvelope(), true},
		{`has(data.action)`, testEnvelope(), false},
		{`has(data.action) && data.action == "opened"`, testEnvelope(), false},
		{`has(data.repository.id) && data.repository.id > 1000`, testEnvelope(), true},
		{`data.repository.id == 1296269`, testEnvelope(), true},
		{`data.repository.id > 1000.5`, testEnvelope(), true},
		{`data.repository.size > 100`, testEnvelope(), true},
		{`data.repository.size < 108u`, testEnvelope(), false},
		{`data.repository.stargazers_count + 1 == 81`, testEnvelope(), true},
		{`data.repository.private == false`, testEnvelope(), true},
		{`"api" in data.repository.topics`, testEnvelope(), true},
		{`data.commits.exists(c, c.message.contains("deploy"))`, testEnvelope(), true},
		{`data.commits.all(c, c.author.email.endsWith("@github.com"))`, testEnvelope(), true},
		{`size(data.commits) == 2`, testEnvelope(), true},
		{`data.commits.exists(c, "README.md" in c.modified)`, testEnvelope(), true},
		{`data.head_commit.message.matches("^deploy:")`, testEnvelope(), true},
		{`data == null`, text, true},
		{`data == null`, testEnvelope(), false},
		{`size(form) == 0`, testEnvelope(), true},
		{`form.command == "/deploy" && form.text == "prod"`, formEnvelope(), true},
		{`form.channel == ["a", "b"]`, formEnvelope(), true},
		{`"b" in form.channel`, formEnvelope(), true},
		{`has(form.user_name)`, formEnvelope(), true},
		{`data == null && size(headers) == 0`, formEnvelope(), true},
		{`data["ref"] == "refs/heads/main" && data.commits[1].author["name"] == "Octo Cat"`, testEnvelope(), true},
		{`data.commits[replay - 1].id == "6113728f"`, testEnvelope(), true},
		{`data.commits[size(data.commits) - 1].id == "6113728f"`, testEnvelope(), true},
		{`(data.created ? "created" : data.forced ? "forced" : "pushed") == "pushed"`, testEnvelope(), true},
		{`has(data.repository.owner.login) && !has(data.repository.owner.name)`, testEnvelope(), true},
		{`"full_name" in data.repository && !("x" in data.repository)`, testEnvelope(), true},
		{`type in ["push", "pull_request"] && !(source in ["stripe"])`, testEnvelope(), true},
		{`data.commits.exists_one(c, c.added.size() > 0)`, testEnvelope(), true},
		{`data.commits.filter(c, c.author.username == "mona").size() == 1`, testEnvelope(), true},
		{`data.commits.map(c, c.id) == ["0d1a26e6", "6113728f"]`, testEnvelope(), true},
		{`string(data.repository.id) == "1296269" && int(data.repository.size) == 108`, testEnvelope(), true},
		{`data.repository.size == 108.5 && data.repository.stargazers_count == 80.0`, testEnvelope(), true},
		{`duration("1h") > duration("30m") && received_at + duration("1h") > received_at`, testEnvelope(), true},
		{`size(data.pusher.email) == 18`, testEnvelope(), true},
		{`dyn(data.repository.id) == 1296269u`, testEnvelope(), true},
	} {
		t.Run(tc.src, func(t *testing.T) {
			got, err := match(t, tc.src, tc.env)
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			if got != tc.want {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFilterEvaluationErrors(t *testing.T) {
	text := &topics.Envelope{ID: "x:1", Source: "x", EventID: "1", DataBase64: []byte("<xml/>")}
	for _, tc := range []struct {
		src string
		env *topics.Envelope
	}{
		{`data.action == "opened"`, testEnvelope()},       // no such key
		{`data.action == "opened"`, text},                 // data is null
		{`data.ref > 3`, testEnvelope()},                  // string against int
		{`data.repository.name + 1 == 2`, testEnvelope()}, // no such overload
		{`headers["x-missing"] == "a"`, testEnvelope()},
		{`form.command == "/deploy"`, testEnvelope()},
		{`data.repository`, testEnvelope()},
	} {
		t.Run(tc.src, func(t *testing.T) {
			f, err := CompileFilter(tc.src)
			if err != nil {
				if tc.src == `data.repository` {
					return // refused at compile: not a bool
				}
				t.Fatalf("CompileFilter: %v", err)
			}
			got, err := f.Match(NewInput(tc.env))
			if err == nil {
				t.Fatalf("Match = %v, nil; want an error", got)
			}
			if got {
				t.Errorf("Match = true with error %v", err)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		src        string
		line, col  int
		msgContain string
	}{
		{`source == `, 1, 11, "mismatched input"},
		{"source == \"github\" &&\n  data.x ==", 2, 12, ""},
		{"source == \"github\" &&\n  nosuch == 1", 2, 3, "undeclared reference to 'nosuch'"},
		{`source == 1`, 1, 8, "no matching overload"},
		{`data.x`, 1, 1, "must be a bool"},
		{`source`, 1, 1, "a filter must be a bool, this one is a string"},
		{`size(data)`, 1, 1, "must be a bool"},
		{`source.nosuch("a")`, 1, 14, "undeclared reference"},
		{`"unterminated`, 1, 1, ""},
		{`é == "a" &&& 1`, 1, 1, ""},
		{`replay`, 1, 1, "a filter must be a bool, this one is an int"},
		{`type = "push"`, 1, 6, "a single = does not compare: write =="},
		{`source == "github" && data.n = 1`, 1, 30, "a single = does not compare: write =="},
		{`replay == 1.0`, 1, 8, "an int and a double do not mix: write 1 for an int and 1.0 for a double, or convert with int(...) or double(...)"},
		{`size(type) + 0.5 > 2.0`, 1, 12, "an int and a double do not mix"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			f, err := CompileFilter(tc.src)
			if err == nil {
				t.Fatalf("CompileFilter = %v, nil; want an error", f)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if tc.line != 0 && (e.Line != tc.line || (tc.col != 0 && e.Column != tc.col)) {
				t.Errorf("error at line %d, column %d (%v), want line %d, column %d", e.Line, e.Column, e, tc.line, tc.col)
			}
			if !strings.Contains(e.Msg, tc.msgContain) {
				t.Errorf("message %q does not contain %q", e.Msg, tc.msgContain)
			}
			if want := "line "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestTransform(t *testing.T) {
	for _, tc := range []struct {
		src, want string
		env       *topics.Envelope
	}{
		{`{"text": "push to " + data.repository.full_name + " by " + data.pusher.name}`,
			`{"text":"push to octocat/hello-world by octocat"}`, testEnvelope()},
		{`{"text": "<" + data.repository.html_url + "|" + data.repository.full_name + ">: " + string(size(data.commits)) + " commits",
		   "blocks": data.commits.map(c, {"type": "section", "text": {"type": "mrkdwn", "text": "*" + c.author.name + "*: " + c.message}})}`,
			`{"blocks":[{"text":{"text":"*Mona*: Fix the readme","type":"mrkdwn"},"type":"section"},{"text":{"text":"*Octo Cat*: deploy: production","type":"mrkdwn"},"type":"section"}],"text":"<https://github.com/octocat/hello-world|octocat/hello-world>: 2 commits"}`,
			testEnvelope()},
		{`data`, `null`, &topics.Envelope{ID: "x:1", DataBase64: []byte("x")}},
		{`data.repository.id`, `1296269`, testEnvelope()},
		{`data.repository.size`, `108.5`, testEnvelope()},
		{`[1, 2u, 2.0, 1e21, 1e-7, -0.5, true, null, "a\"\n\u2028"]`, `[1,2,2,1e+21,1e-7,-0.5,true,null,"a\"\n\u2028"]`, testEnvelope()},
		{`{"at": received_at, "in": duration("1500ms"), "b": b"hi", 2: "two", false: 0}`,
			`{"2":"two","at":"2024-05-01T10:06:00Z","b":"aGk=","false":0,"in":"1.5s"}`, testEnvelope()},
		{`{"id": id, "source": source, "event_id": event_id, "type": type, "replay": replay, "h": headers}`,
			`{"event_id":"delivery-1","h":{"x-github-delivery":"delivery-1","x-github-event":"push"},"id":"github:delivery-1","replay":2,"source":"github","type":"push"}`,
			testEnvelope()},
		{`form`, `{"channel":["a","b"],"command":"/deploy","text":"prod","user_name":"mona"}`, formEnvelope()},
		{`data.repository.topics`, `["octocat","api"]`, testEnvelope()},
		{`9223372036854775807`, `9223372036854775807`, testEnvelope()},
	} {
		t.Run(tc.src, func(t *testing.T) {
			tr, err := CompileTransform(tc.src)
			if err != nil {
				t.Fatalf("CompileTransform: %v", err)
			}
			got, err := tr.Apply(NewInput(tc.env))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Apply = %s\nwant    %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("Apply = %s, not JSON", got)
			}
		})
	}
}

func TestTransformErrors(t *testing.T) {
	if _, err := CompileTransform(`type(data)`); err == nil || !strings.Contains(err.Error(), "must be JSON") {
		t.Errorf("CompileTransform(type(data)) = %v, want a refusal", err)
	}
	for _, src := range []string{
		`data.action`,  // no such key
		`[type(data)]`, // a type is not JSON
		`0.0 / 0.0`,    // NaN
		`[data.x]`,     // no such key, in a list
	} {
		t.Run(src, func(t *testing.T) {
			tr, err := CompileTransform(src)
			if err != nil {
				t.Fatalf("CompileTransform: %v", err)
			}
			got, err := tr.Apply(NewInput(testEnvelope()))
			if err == nil {
				t.Fatalf("Apply = %s, nil; want an error", got)
			}
		})
	}
}

// TestEnvelopeRoundTrip evaluates envelopes as the dispatcher has them:
// parsed from their records.
func TestEnvelopeRoundTrip(t *testing.T) {
	for _, env := range []*topics.Envelope{testEnvelope(), formEnvelope()} {
		b, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := topics.ParseEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{
			`id == "` + env.ID + `" && received_at == timestamp("` + env.ReceivedAt.Format(time.RFC3339) + `")`,
			`source != "slack" || form.channel == ["a", "b"] && form.text == "prod"`,
			`source != "github" || data.commits[1].author.name == "Octo Cat" && headers["x-github-event"] == "push" && replay == 2`,
		} {
			got, err := match(t, src, parsed)
			if !got || err != nil {
				t.Errorf("%s on %s: Match = %v, %v; want true", src, env.ID, got, err)
			}
		}
	}
}

// TestInputSharedAndLazy: evaluations share an Input from many goroutines
// (run with -race), and the body is parsed only once something reads data.
func TestInputSharedAndLazy(t *testing.T) {
	in := NewInput(testEnvelope())
	f, err := CompileFilter(`source == "github"`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(in); !ok || err != nil {
		t.Fatalf("Match = %v, %v", ok, err)
	}
	if in.data != nil {
		t.Errorf("the body was parsed for a filter that does not read data")
	}
	g, err := CompileFilter(`data.commits.exists(c, c.message.contains("deploy"))`)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := CompileTransform(`{"text": data.repository.full_name}`)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for range 8 {
		go func() {
			for range 50 {
				if ok, err := g.Match(in); !ok || err != nil {
					done <- fmt.Errorf("Match = %v, %v", ok, err)
					return
				}
				if out, err := tr.Apply(in); string(out) != `{"text":"octocat/hello-world"}` || err != nil {
					done <- fmt.Errorf("Apply = %s, %v", out, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
