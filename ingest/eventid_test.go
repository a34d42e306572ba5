package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// newPayload builds a payload from a body and header name/value pairs; JSON
// is set when the body is valid JSON, as the handler does.
func newPayload(body string, headers ...string) *Payload {
	h := http.Header{}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Add(headers[i], headers[i+1])
	}
	b := []byte(body)
	return &Payload{Header: h, Body: b, JSON: gjson.ValidBytes(b)}
}

// sha256ID is the id made from the hash of s.
func sha256ID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mustParseField compiles spec or fails the test.
func mustParseField(t testing.TB, spec string) *Field {
	t.Helper()
	f, err := ParseField(spec)
	if err != nil {
		t.Fatalf("ParseField(%q): %v", spec, err)
	}
	return f
}

func TestParseField(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		nilWant bool
		headers string // comma separated
	}{
		{spec: "", nilWant: true},
		{spec: "   ", nilWant: true},
		{spec: "header:X-GitHub-Delivery", headers: "X-Github-Delivery"},
		{spec: "header:x-gitlab-event", headers: "X-Gitlab-Event"},
		{spec: " header:webhook-id ", headers: "Webhook-Id"},
		{spec: "json:id"},
		{spec: "json:data.object.id"},
		{spec: "json:items.0.id"},
		{spec: "json:a*b.#.@this"},
		{spec: "template:{object.id}_{eventType}"},
		{spec: "template:{header:X-Request-Id}", headers: "X-Request-Id"},
		{spec: "template:{header:x-a}-{header:X-A}-{header:X-B}", headers: "X-A,X-B"},
		{spec: "template:pre {json.path} post"},
		{spec: "preset:gitlab", headers: "X-Gitlab-Event-Uuid"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := ParseField(tc.spec)
			if err != nil {
				t.Fatalf("ParseField(%q): %v", tc.spec, err)
			}
			if got, want := f == nil, tc.nilWant; got != want {
				t.Errorf("ParseField(%q) == nil: got %v, want %v", tc.spec, got, want)
			}
			if got, want := strings.Join(f.Headers(), ","), tc.headers; got != want {
				t.Errorf("ParseField(%q).Headers(): got %q, want %q", tc.spec, got, want)
			}
		})
	}
}

func TestParseFieldErrors(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string
	}{
		{"foo:bar", `unknown form "foo:" (want header:, json:, template: or preset:gitlab)`},
		{"X-Event-Id", `unknown form "X-Event-Id" (want header:, json:, template: or preset:gitlab)`},
		{"Header:X-A", `unknown form "Header:" (want header:, json:, template: or preset:gitlab)`},
		{"header:", `header: empty name`},
		{"header:X Event", `header "X Event": invalid header name`},
		{"header:X:Event", `header "X:Event": invalid header name`},
		{"json:", `json: empty path`},
		{"json:a..b", `json path "a..b": empty segment`},
		{"json:.a", `json path ".a": empty segment`},
		{"json:a.", `json path "a.": empty segment`},
		{"template:", `template "": no {json.path} or {header:Name} part`},
		{"template:abc", `template "abc": no {json.path} or {header:Name} part`},
		{"template:{a", `template "{a": unbalanced braces: "{" at byte 0 is not closed`},
		{"template:{a{b}}", `template "{a{b}}": unbalanced braces: "{" at byte 0 is not closed`},
		{"template:a}", `template "a}": unbalanced braces: "}" at byte 1 has no "{"`},
		{"template:{a}}", `template "{a}}": unbalanced braces: "}" at byte 3 has no "{"`},
		{"template:x{}", `template "x{}": empty name in {} at byte 1`},
		{"template:{header:}", `template "{header:}": header: empty name`},
		{"template:{header:a b}", `template "{header:a b}": header "a b": invalid header name`},
		{"template:{a..b}", `template "{a..b}": json path "a..b": empty segment`},
		{"preset:", `preset: empty name (want preset:gitlab)`},
		{"preset:github", `unknown preset "github" (want preset:gitlab)`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := ParseField(tc.spec)
			if err == nil {
				t.Fatalf("ParseField(%q): got %+v, want error %q", tc.spec, f, tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ParseField(%q): got %q, want %q", tc.spec, got, tc.want)
			}
		})
	}
}

func TestFieldValue(t *testing.T) {
	const body = `{"id":"evt_1","n":12345,"f":1.5e3,"neg":-7,"t":true,"no":false,"null":null,` +
		`"empty":"","obj":{"a":1},"arr":[1,2],"esc":"caf\u00e9 \"q\"",` +
		`"data":{"object":{"id":"obj_9"}},"items":[{"id":"i0"},{"id":"i1"}],` +
		`"object":{"id":"sub_1"},"eventType":"invoice.paid"}`
	for _, tc := range []struct {
		name    string
		spec    string
		payload *Payload
		want    string
		wantOK  bool
	}{
		{"header", "header:X-Event-Id", newPayload(body, "X-Event-Id", "h1"), "h1", true},
		{"header case", "header:x-event-id", newPayload(body, "X-Event-ID", "h1"), "h1", true},
		{"header first value", "header:X-A", newPayload(body, "X-A", "one", "X-A", "two"), "one", true},
		{"header missing", "header:X-Event-Id", newPayload(body), "", false},
		{"header empty", "header:X-Event-Id", newPayload(body, "X-Event-Id", ""), "", false},
		{"json string", "json:id", newPayload(body), "evt_1", true},
		{"json integer", "json:n", newPayload(body), "12345", true},
		{"json float literal", "json:f", newPayload(body), "1.5e3", true},
		{"json negative", "json:neg", newPayload(body), "-7", true},
		{"json true", "json:t", newPayload(body), "true", true},
		{"json false", "json:no", newPayload(body), "false", true},
		{"json null", "json:null", newPayload(body), "", false},
		{"json empty string", "json:empty", newPayload(body), "", false},
		{"json object", "json:obj", newPayload(body), "", false},
		{"json array", "json:arr", newPayload(body), "", false},
		{"json escaped", "json:esc", newPayload(body), `café "q"`, true},
		{"json nested", "json:data.object.id", newPayload(body), "obj_9", true},
		{"json array index", "json:items.1.id", newPayload(body), "i1", true},
		{"json array out of range", "json:items.2.id", newPayload(body), "", false},
		{"json array key", "json:items.id", newPayload(body), "", false},
		{"json missing", "json:nope", newPayload(body), "", false},
		{"json not JSON", "json:id", newPayload(`id=evt_1`), "", false},
		{"json flagged not JSON", "json:id", &Payload{Body: []byte(`{"id":"x"}`)}, "", false},
		{"template", "template:{object.id}_{eventType}", newPayload(body), "sub_1_invoice.paid", true},
		{"template header", "template:{header:X-Shop}/{id}", newPayload(body, "X-Shop", "s1"), "s1/evt_1", true},
		{"template literals", "template:a-{n}-b", newPayload(body), "a-12345-b", true},
		{"template missing json", "template:{object.id}_{nope}", newPayload(body), "", false},
		{"template missing header", "template:{header:X-Shop}/{id}", newPayload(body), "", false},
		{"template null", "template:{id}-{null}", newPayload(body), "", false},
		{"template not JSON", "template:{header:X-Shop}/{id}", newPayload(`x`, "X-Shop", "s1"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := mustParseField(t, tc.spec).Value(tc.payload)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("%s Value: got %q, %v, want %q, %v", tc.spec, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestFieldValueLiteralPaths checks that gjson syntax in a configured path is
// read as plain key text, never as a query or modifier.
func TestFieldValueLiteralPaths(t *testing.T) {
	const body = `{"a*b":"star","axb":"wild","a?c":"question","abc":"wild2",` +
		`"@this":"at","#":"hash","a|b":"pipe","!true":"bang","k=v":"eq","back\\slash":"bs",` +
		`"arr":[{"id":"x"},{"id":"y"}],"obj":{"#":"objhash"},"[0]":"bracket","{a}":"brace"}`
	for _, tc := range []struct {
		path   string
		want   string
		wantOK bool
	}{
		{"a*b", "star", true},
		{"a?c", "question", true},
		{"a*", "", false},
		{"a?b", "", false},
		{"@this", "at", true},
		{"@reverse", "", false},
		{"#", "hash", true},
		{"a|b", "pipe", true},
		{"!true", "bang", true},
		{"!false", "", false},
		{"k=v", "eq", true},
		{`back\slash`, "bs", true},
		{"[0]", "bracket", true},
		{"{a}", "brace", true},
		{"arr.#", "", false},
		{"arr.#.id", "", false},
		{"arr.#(id==y).id", "", false},
		{"arr.1.id", "y", true},
		{"arr.*.id", "", false},
		{"arr.1|@this", "", false},
		{"obj.#", "objhash", true},
		{"obj.*", "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, ok := mustParseField(t, "json:"+tc.path).Value(newPayload(body))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("json:%s Value: got %q, %v, want %q, %v", tc.path, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestFieldValueDetached checks that values never share the request body.
func TestFieldValueDetached(t *testing.T) {
	p := newPayload(`{"id":"evt_1","project_id":1,"object_kind":"note","object_attributes":{"id":2,"updated_at":"now"}}`)
	var got []string
	for _, spec := range []string{"json:id", "template:{id}", "preset:gitlab"} {
		v, _ := mustParseField(t, spec).Value(p)
		got = append(got, v)
	}
	id, _ := EventID(nil, p)
	typ := EventType(mustParseField(t, "json:object_kind"), p, "src")
	got = append(got, id, typ)
	for i := range p.Body {
		p.Body[i] = 'x'
	}
	want := []string{"evt_1", "evt_1", "note-1-2-now", "evt_1", "note"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %d after the body changed: got %q, want %q", i, got[i], want[i])
		}
	}
}

func TestFieldHeaders(t *testing.T) {
	var nilField *Field
	if got, want := len(nilField.Headers()), 0; got != want {
		t.Errorf("nil Field Headers: got %d, want %d", got, want)
	}
	if got, ok := nilField.Value(newPayload(`{"id":"x"}`)); got != "" || ok {
		t.Errorf("nil Field Value: got %q, %v, want %q, false", got, ok, "")
	}
	f := mustParseField(t, "header:X-A")
	f.Headers()[0] = "mutated"
	if got, want := f.Headers()[0], "X-A"; got != want {
		t.Errorf("Headers after mutating a returned slice: got %q, want %q", got, want)
	}
	want := "Idempotency-Key,X-Event-Id,Webhook-Id,X-Github-Delivery,X-Shopify-Event-Id,X-Shopify-Webhook-Id,X-Gitlab-Event-Uuid"
	if got := strings.Join(DefaultIDHeaders, ","); got != want {
		t.Errorf("DefaultIDHeaders: got %q, want %q", got, want)
	}
}

func TestEventIDDefaultChain(t *testing.T) {
	const body = `{"id":"json-id","event_id":"json-event-id","messageId":"json-message-id"}`
	// Each header wins over every later one and over the JSON fields.
	for i, name := range []string{
		"Idempotency-Key", "X-Event-ID", "webhook-id", "X-GitHub-Delivery",
		"X-Shopify-Event-Id", "X-Shopify-Webhook-Id", "X-Gitlab-Event-UUID",
	} {
		t.Run(name, func(t *testing.T) {
			var headers []string
			for _, later := range DefaultIDHeaders[i:] {
				headers = append(headers, later, "v-"+later)
			}
			got, ok := EventID(nil, newPayload(body, headers...))
			if want := "v-" + DefaultIDHeaders[i]; got != want || !ok {
				t.Errorf("EventID: got %q, %v, want %q, true", got, ok, want)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		payload *Payload
		want    string
	}{
		{"empty header skipped", newPayload(body, "Idempotency-Key", "", "Webhook-Id", "wh"), "wh"},
		{"json id", newPayload(body), "json-id"},
		{"json event_id", newPayload(`{"event_id":"e","messageId":"m"}`), "e"},
		{"json messageId", newPayload(`{"messageId":"m"}`), "m"},
		{"json numeric id", newPayload(`{"id":12345}`), "12345"},
		{"json null id", newPayload(`{"id":null,"event_id":"e"}`), "e"},
		{"json empty id", newPayload(`{"id":"","messageId":"m"}`), "m"},
		{"json object id", newPayload(`{"id":{"a":1}}`), sha256ID(`{"id":{"a":1}}`)},
		{"json nested id ignored", newPayload(`{"data":{"id":"x"}}`), sha256ID(`{"data":{"id":"x"}}`)},
		{"not JSON", newPayload(`id=1&x=2`), sha256ID(`id=1&x=2`)},
		{"flagged not JSON", &Payload{Body: []byte(`{"id":"x"}`)}, sha256ID(`{"id":"x"}`)},
		{"empty body", newPayload(``), sha256ID(``)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := EventID(nil, tc.payload)
			if got != tc.want || !ok {
				t.Errorf("EventID: got %q, %v, want %q, true", got, ok, tc.want)
			}
		})
	}
}

func TestEventIDConfigured(t *testing.T) {
	p := newPayload(`{"id":"json-id","data":{"id":"d1"}}`, "X-Event-Id", "hdr")
	for _, tc := range []struct {
		spec   string
		want   string
		wantOK bool
	}{
		{"json:data.id", "d1", true},
		{"header:X-Event-Id", "hdr", true},
		// A configured field has no fallback to the default chain.
		{"json:data.missing", "", false},
		{"header:X-Other", "", false},
		{"template:{id}-{header:X-Other}", "", false},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, ok := EventID(mustParseField(t, tc.spec), p)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("EventID(%s): got %q, %v, want %q, %v", tc.spec, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestEventIDLength(t *testing.T) {
	id200 := strings.Repeat("a", 200)
	id201 := strings.Repeat("b", 201)
	for _, tc := range []struct {
		name    string
		field   string
		payload *Payload
		want    string
	}{
		{"header 200 kept", "", newPayload(`{}`, "Webhook-Id", id200), id200},
		{"header 201 hashed", "", newPayload(`{}`, "Webhook-Id", id201), sha256ID(id201)},
		{"json 200 kept", "", newPayload(`{"id":"` + id200 + `"}`), id200},
		{"json 201 hashed", "", newPayload(`{"id":"` + id201 + `"}`), sha256ID(id201)},
		{"configured 200 kept", "json:x", newPayload(`{"x":"` + id200 + `"}`), id200},
		{"configured 201 hashed", "json:x", newPayload(`{"x":"` + id201 + `"}`), sha256ID(id201)},
		{"template 201 hashed", "template:{x}b", newPayload(`{"x":"` + id201[1:] + `"}`), sha256ID(id201)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *Field
			if tc.field != "" {
				f = mustParseField(t, tc.field)
			}
			got, ok := EventID(f, tc.payload)
			if got != tc.want || !ok {
				t.Errorf("EventID: got %q, %v, want %q, true", got, ok, tc.want)
			}
		})
	}
}

func TestEventType(t *testing.T) {
	long := strings.Repeat("t", 250)
	// 199 ASCII bytes then "é" (2 bytes) straddles the 200-byte limit.
	straddle := strings.Repeat("t", 199) + "éé"
	for _, tc := range []struct {
		name    string
		field   string
		payload *Payload
		want    string
	}{
		{"default json type", "", newPayload(`{"type":"invoice.paid"}`), "invoice.paid"},
		{"default source", "", newPayload(`{"kind":"x"}`), "billing"},
		{"default null type", "", newPayload(`{"type":null}`), "billing"},
		{"default not JSON", "", newPayload(`type=x`), "billing"},
		{"header", "header:X-GitHub-Event", newPayload(`{"type":"t"}`, "X-GitHub-Event", "push"), "push"},
		{"json", "json:event.kind", newPayload(`{"type":"t","event":{"kind":"k"}}`), "k"},
		{"template", "template:{a}.{b}", newPayload(`{"a":"x","b":"y"}`), "x.y"},
		{"field missing falls back to type", "header:X-GitHub-Event", newPayload(`{"type":"t"}`), "t"},
		{"field missing falls back to source", "json:nope", newPayload(`{}`), "billing"},
		{"200 kept", "", newPayload(`{"type":"` + long[:200] + `"}`), long[:200]},
		{"201 cut", "", newPayload(`{"type":"` + long[:201] + `"}`), long[:200]},
		{"cut at UTF-8 boundary", "", newPayload(`{"type":"` + straddle + `"}`), straddle[:199]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *Field
			if tc.field != "" {
				f = mustParseField(t, tc.field)
			}
			if got := EventType(f, tc.payload, "billing"); got != tc.want {
				t.Errorf("EventType: got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("long source", func(t *testing.T) {
		if got, want := EventType(nil, newPayload(``), long), long[:200]; got != want {
			t.Errorf("EventType: got %q, want %q", got, want)
		}
	})
	t.Run("invalid UTF-8 cut at 200", func(t *testing.T) {
		bad := strings.Repeat("\x80", 300)
		if got, want := EventType(nil, newPayload(``), bad), bad[:200]; got != want {
			t.Errorf("EventType: got %q, want %q", got, want)
		}
	})
}

// GitLab payloads, trimmed from the examples of GitLab's webhook events
// documentation.
const (
	gitlabPushPayload = `{
  "object_kind": "push",
  "event_name": "push",
  "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
  "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "ref": "refs/heads/master",
  "ref_protected": true,
  "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "user_id": 4,
  "user_name": "John Smith",
  "project_id": 15,
  "project": {"id": 15, "name": "Diaspora", "path_with_namespace": "mike/diaspora", "default_branch": "master"},
  "commits": [
    {"id": "b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327", "message": "Update Catalan translation to e38cb41.\n", "timestamp": "2011-12-12T14:27:31+02:00"},
    {"id": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", "message": "fixed readme", "timestamp": "2012-01-03T23:36:29+02:00"}
  ],
  "total_commits_count": 4
}`
	gitlabTagPushPayload = `{
  "object_kind": "tag_push",
  "event_name": "tag_push",
  "before": "0000000000000000000000000000000000000000",
  "after": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
  "ref": "refs/tags/v1.0.0",
  "ref_protected": true,
  "checkout_sha": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
  "user_id": 1,
  "project_id": 1,
  "project": {"id": 1, "name": "Example", "path_with_namespace": "jsmith/example"},
  "commits": [],
  "total_commits_count": 0
}`
	gitlabTagDeletePayload = `{
  "object_kind": "tag_push",
  "event_name": "tag_push",
  "before": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
  "after": "0000000000000000000000000000000000000000",
  "ref": "refs/tags/v1.0.0",
  "checkout_sha": null,
  "project_id": 1,
  "project": {"id": 1, "name": "Example"},
  "commits": [],
  "total_commits_count": 0
}`
	gitlabMergeRequestPayload = `{
  "object_kind": "merge_request",
  "event_type": "merge_request",
  "user": {"id": 1, "name": "Administrator", "username": "root"},
  "project": {"id": 1, "name": "Gitlab Test", "path_with_namespace": "gitlabhq/gitlab-test", "default_branch": "master"},
  "object_attributes": {
    "id": 99,
    "iid": 1,
    "target_branch": "master",
    "source_branch": "ms-viewport",
    "source_project_id": 14,
    "target_project_id": 14,
    "author_id": 51,
    "title": "MS-Viewport",
    "created_at": "2013-12-03T17:23:34Z",
    "updated_at": "2013-12-03T17:23:34Z",
    "state": "opened",
    "merge_status": "unchecked",
    "last_commit": {
      "id": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
      "message": "fixed readme",
      "timestamp": "2012-01-03T23:36:29+02:00"
    },
    "url": "http://example.com/diaspora/merge_requests/1",
    "action": "open"
  },
  "labels": [{"id": 206, "title": "API", "project_id": 14}]
}`
	gitlabNotePayload = `{
  "object_kind": "note",
  "event_type": "note",
  "user": {"id": 1, "name": "Administrator", "username": "root"},
  "project_id": 5,
  "project": {"id": 5, "name": "Gitlab Test", "path_with_namespace": "gitlab-org/gitlab-test"},
  "object_attributes": {
    "id": 1244,
    "note": "This MR needs work.",
    "noteable_type": "MergeRequest",
    "author_id": 1,
    "created_at": "2015-05-17 18:21:36 UTC",
    "updated_at": "2015-05-17 18:21:36 UTC",
    "project_id": 5,
    "noteable_id": 7,
    "url": "http://example.com/gitlab-org/gitlab-test/merge_requests/1#note_1244",
    "action": "create"
  },
  "merge_request": {"id": 7, "iid": 1, "target_project_id": 5}
}`
	gitlabEmojiPayload = `{
  "object_kind": "emoji",
  "event_type": "award",
  "user": {"id": 1, "name": "Blake Bergstrom", "username": "root"},
  "project_id": 6,
  "project": {"id": 6, "name": "Flight", "path_with_namespace": "flightjs/Flight"},
  "object_attributes": {
    "user_id": 1,
    "created_at": "2023-07-04 20:44:11 UTC",
    "id": 1,
    "name": "thumbsup",
    "awardable_type": "Note",
    "awardable_id": 363,
    "updated_at": "2023-07-04 20:44:11 UTC",
    "action": "award",
    "awarded_on_url": "http://example.com/flightjs/Flight/-/issues/42#note_363"
  },
  "note": {"id": 363, "noteable_type": "Issue", "project_id": 6}
}`
	gitlabPipelinePayload = `{
  "object_kind": "pipeline",
  "object_attributes": {"id": 31, "iid": 3, "ref": "master", "sha": "bcbb5ec396a2c0f828686f14fac9b80b780504f2", "status": "success"},
  "project": {"id": 1, "name": "Gitlab Test"}
}`
)

func TestGitLabPreset(t *testing.T) {
	const uuid = "9cb4b4b6-7e0f-4d9e-a0b5-6a1c3f1e8c2d"
	emojiRevoke := strings.Replace(gitlabEmojiPayload, `"action": "award"`, `"action": "revoke"`, 1)
	emojiNoAction := strings.Replace(gitlabEmojiPayload, `"action": "award",`, ``, 1)
	for _, tc := range []struct {
		name    string
		payload *Payload
		want    string
		wantOK  bool
	}{
		{"push", newPayload(gitlabPushPayload, "X-Gitlab-Event-UUID", uuid),
			"push-15-da1560886d4f094c3e6c9ef40349f7d38b5d27d7-refs/heads/master", true},
		{"tag push", newPayload(gitlabTagPushPayload, "X-Gitlab-Event-UUID", uuid),
			"push-1-82b3d5ae55f7080f1e6022629cdb57bfae7cccc7-refs/tags/v1.0.0", true},
		{"tag delete, checkout_sha null", newPayload(gitlabTagDeletePayload, "X-Gitlab-Event-UUID", uuid),
			"push-1-0000000000000000000000000000000000000000-refs/tags/v1.0.0", true},
		{"merge request", newPayload(gitlabMergeRequestPayload, "X-Gitlab-Event-UUID", uuid),
			"mr-1-1-da1560886d4f094c3e6c9ef40349f7d38b5d27d7-open-2013-12-03T17:23:34Z", true},
		{"note", newPayload(gitlabNotePayload, "X-Gitlab-Event-UUID", uuid),
			"note-5-1244-2015-05-17 18:21:36 UTC", true},
		{"emoji award", newPayload(gitlabEmojiPayload, "X-Gitlab-Event-UUID", uuid),
			"emoji-6-1-2023-07-04 20:44:11 UTC-award", true},
		{"emoji revoke", newPayload(emojiRevoke, "X-Gitlab-Event-UUID", uuid),
			"emoji-6-1-2023-07-04 20:44:11 UTC-revoke", true},
		{"emoji without action", newPayload(emojiNoAction, "X-Gitlab-Event-UUID", uuid),
			"emoji-6-1-2023-07-04 20:44:11 UTC", true},
		{"push without top-level project_id", newPayload(strings.Replace(gitlabPushPayload, `"project_id": 15,`, ``, 1)),
			"push-15-da1560886d4f094c3e6c9ef40349f7d38b5d27d7-refs/heads/master", true},
		{"merge request without project", newPayload(
			`{"object_kind":"merge_request","object_attributes":{"iid":2,"target_project_id":14,` +
				`"last_commit":{"id":"abc"},"action":"update","updated_at":"t"}}`),
			"mr-14-2-abc-update-t", true},
		{"other kind falls back to UUID", newPayload(gitlabPipelinePayload, "X-Gitlab-Event-UUID", uuid), uuid, true},
		{"missing part falls back to UUID",
			newPayload(strings.Replace(gitlabNotePayload, `"id": 1244,`, ``, 1), "X-Gitlab-Event-UUID", uuid), uuid, true},
		{"null part falls back to UUID",
			newPayload(strings.Replace(gitlabMergeRequestPayload, `"action": "open"`, `"action": null`, 1), "X-Gitlab-Event-UUID", uuid), uuid, true},
		{"not JSON falls back to UUID", newPayload(`object_kind=push`, "X-Gitlab-Event-UUID", uuid), uuid, true},
		{"no key, no UUID", newPayload(gitlabPipelinePayload), "", false},
		{"empty UUID", newPayload(gitlabPipelinePayload, "X-Gitlab-Event-UUID", ""), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := EventID(mustParseField(t, "preset:gitlab"), tc.payload)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("EventID(preset:gitlab): got %q, %v, want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestGitLabPathsPlain checks that the preset's paths need no escaping, so
// that gjson reads them as plain keys.
func TestGitLabPathsPlain(t *testing.T) {
	for _, spec := range []*gitlabKeySpec{&gitlabPush, &gitlabMergeRequest, &gitlabNote, &gitlabEmoji} {
		for _, alts := range spec.parts {
			for _, gp := range alts {
				t.Run(spec.prefix+"/"+gp.path, func(t *testing.T) {
					c, err := compileJSONPath(gp.path)
					if err != nil {
						t.Fatalf("compileJSONPath(%q): %v", gp.path, err)
					}
					if got, want := fmt.Sprint(c.plain, " ", c.escaped), fmt.Sprint(true, " ", gp.path); got != want {
						t.Errorf("compiled path: got %q, want %q", got, want)
					}
				})
			}
		}
	}
}

// FuzzParseField checks, for any spec: ParseField never panics; it returns
// nil and no error exactly when the spec is blank; errors are one line;
// Headers are canonical; a compiled field's Value never panics, is non-empty
// when ok, and equals the id of EventID when at most 200 bytes.
func FuzzParseField(f *testing.F) {
	for _, s := range []string{
		"", "header:X-GitHub-Delivery", "json:data.object.id", "json:items.0.id",
		"template:{object.id}_{eventType}", "template:{header:X-A}-{a.b}", "preset:gitlab",
		"template:{", "template:}", "template:{}", "json:a..b", "foo:bar", "json:#(a==1)", "json:@this",
	} {
		f.Add(s)
	}
	body := []byte(`{"object":{"id":"o1"},"eventType":"e","a":{"b":2},"data":{"object":{"id":"d"}},` +
		`"items":[{"id":"i"}],"object_kind":"note","project_id":1,"object_attributes":{"id":2,"updated_at":"u"}}`)
	f.Fuzz(func(t *testing.T, spec string) {
		fld, err := ParseField(spec)
		if err != nil {
			if fld != nil {
				t.Errorf("ParseField(%q): got a field and error %v", spec, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Errorf("ParseField(%q): error is not one line: %q", spec, err)
			}
			return
		}
		if got, want := fld == nil, strings.TrimSpace(spec) == ""; got != want {
			t.Errorf("ParseField(%q) == nil: got %v, want %v", spec, got, want)
		}
		if fld == nil {
			return
		}
		p := &Payload{Header: http.Header{}, Body: body, JSON: true}
		for _, h := range fld.Headers() {
			if got, want := h, http.CanonicalHeaderKey(h); got != want {
				t.Errorf("ParseField(%q).Headers: got %q, want %q", spec, got, want)
			}
			p.Header.Set(h, "hv")
		}
		v, ok := fld.Value(p)
		if ok && v == "" {
			t.Errorf("ParseField(%q).Value: ok with an empty value", spec)
		}
		id, idOK := EventID(fld, p)
		if idOK != ok || (len(v) <= 200 && id != v) {
			t.Errorf("EventID(%q): got %q, %v, want %q, %v", spec, id, idOK, v, ok)
		}
	})
}

// FuzzEventID checks, for any body, header value and spec: EventID and
// EventType never panic; with no field EventID is ok and the id is
// non-empty and either at most 200 bytes or "sha256:" + 64 hex digits; with a
// field an ok id obeys the same bound; EventType is at most 200 bytes and
// valid UTF-8 when its inputs are; results do not change when the body
// changes after the call.
func FuzzEventID(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","type":"invoice.paid"}`), "", "")
	f.Add([]byte(`{"id":12345}`), "", "json:id")
	f.Add([]byte(gitlabMergeRequestPayload), "uuid", "preset:gitlab")
	f.Add([]byte(gitlabPushPayload), "", "preset:gitlab")
	f.Add([]byte(`{"a":{"b":[1,{"c":"d"}]}}`), "h", "template:{a.b.1.c}-{header:X-A}")
	f.Add([]byte(`not json`), "hdr", "header:Webhook-Id")
	f.Add([]byte(`{"type":"`+strings.Repeat("é", 150)+`"}`), "", "")
	f.Fuzz(func(t *testing.T, body []byte, hv, spec string) {
		fld, err := ParseField(spec)
		if err != nil {
			fld = nil
		}
		p := &Payload{
			Header: http.Header{"Webhook-Id": {hv}, "X-A": {hv}, "X-Gitlab-Event-Uuid": {hv}},
			Body:   body,
			JSON:   gjson.ValidBytes(body),
		}
		def, ok := EventID(nil, p)
		if !ok || def == "" || !validEventID(def) {
			t.Errorf("EventID(nil): got %q, %v, want a non-empty id of at most 200 bytes, true", def, ok)
		}
		id, ok := EventID(fld, p)
		if ok && (id == "" || !validEventID(id)) {
			t.Errorf("EventID(%q): got %q, want a non-empty id of at most 200 bytes", spec, id)
		}
		typ := EventType(fld, p, "src")
		if len(typ) > 200 || typ == "" {
			t.Errorf("EventType(%q): got %q, want 1 to 200 bytes", spec, typ)
		}
		if utf8.Valid(body) && utf8.ValidString(hv) && !utf8.ValidString(typ) {
			t.Errorf("EventType(%q): got invalid UTF-8 %q", spec, typ)
		}
		saved := [3]string{strings.Clone(def), strings.Clone(id), strings.Clone(typ)}
		for i := range body {
			body[i] ^= 0xff
		}
		if got, want := [3]string{def, id, typ}, saved; got != want {
			t.Errorf("results after the body changed: got %q, want %q", got, want)
		}
	})
}

// validEventID reports whether id is at most 200 bytes, or a hash id.
func validEventID(id string) bool {
	if len(id) <= 200 {
		return true
	}
	hexPart, ok := strings.CutPrefix(id, "sha256:")
	_, err := hex.DecodeString(hexPart)
	return ok && len(hexPart) == 64 && err == nil
}

// benchmarkBody is a 1 KiB JSON body shaped like a Stripe event.
var benchmarkBody = func() []byte {
	b := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2022-11-15",` +
		`"created":1686089970,"type":"invoice.paid","livemode":false,"pending_webhooks":1,` +
		`"request":{"id":"req_8x3kTz","idempotency_key":"b7f1c2d4-8e1a-4f2b-9c3d-5e6f7a8b9c0d"},` +
		`"data":{"object":{"id":"in_1NG8Dt2eZvKYlo2C7hM4tmCf","object":"invoice","amount_due":2000,` +
		`"amount_paid":2000,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","status":"paid",` +
		`"lines":{"object":"list","data":[{"id":"il_1","amount":2000,"description":"1 x Pro plan"}]},` +
		`"metadata":{"pad":"`)
	for len(b) < 1024-5 {
		b = append(b, 'x')
	}
	return append(b, `"}}}}`...)
}()

func BenchmarkEventID(b *testing.B) {
	if len(benchmarkBody) != 1024 || !gjson.ValidBytes(benchmarkBody) {
		b.Fatalf("benchmark body: got %d bytes, valid %v, want 1024, true", len(benchmarkBody), gjson.ValidBytes(benchmarkBody))
	}
	for _, bc := range []struct {
		name    string
		spec    string
		headers []string
	}{
		{"default/header", "", []string{"Webhook-Id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"}},
		{"default/json", "", nil},
		{"default/body-hash", "", nil},
		{"json-path", "json:data.object.id", nil},
		{"template", "template:{data.object.id}_{type}", nil},
		{"gitlab", "preset:gitlab", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := mustParseField(b, bc.spec)
			p := newPayload(string(benchmarkBody), bc.headers...)
			if bc.name == "default/body-hash" {
				p.JSON = false
			}
			if bc.name == "gitlab" {
				p = newPayload(gitlabMergeRequestPayload)
			}
			if _, ok := EventID(f, p); !ok {
				b.Fatalf("EventID(%q): not ok", bc.spec)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(p.Body)))
			for b.Loop() {
				EventID(f, p)
			}
		})
	}
}
