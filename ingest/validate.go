package ingest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tidwall/gjson"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/hookstream/hookstream/topics"
)

// Validation checks one source's payloads against JSON Schemas (draft
// 2020-12) chosen by event type, after signature verification and before
// anything is written.
type Validation struct {
	// Schemas maps event-type globs (path.Match syntax) to schema files;
	// relative paths resolve against the sources file's directory. The most
	// specific glob that matches an event's type applies ("*" last); an
	// event whose type no glob matches is accepted unvalidated.
	Schemas map[string]string `yaml:"schemas"`
	// OnInvalid is OnInvalidReject (the default) or OnInvalidDLQ.
	OnInvalid string `yaml:"on_invalid"`

	// rules are the compiled schemas, most specific glob first; set by
	// LoadSources.
	rules []*schemaRule
}

// The actions of on_invalid.
const (
	// OnInvalidReject answers 422 with the violations and writes nothing.
	OnInvalidReject = "reject"
	// OnInvalidDLQ accepts the event (202) marked with its violations; the
	// processor dead-letters it with stage validate.
	OnInvalidDLQ = "dlq"
)

// maxViolations bounds the violations reported for one payload.
const maxViolations = 10

// errNotJSON is the violation of a body that is not JSON on a source whose
// schema applies to its event type.
const errNotJSON = "body is not JSON"

// schemaRule is one glob of Schemas with its compiled schema.
type schemaRule struct {
	glob   string
	file   string // as configured
	schema *jsonschema.Schema
}

// action is OnInvalid with its default.
func (v Validation) action() string { return cmp.Or(v.OnInvalid, OnInvalidReject) }

// problems reports every problem of v's settings, each naming its field.
// The schema files themselves are read and compiled by load.
func (v Validation) problems() []error {
	var errs []error
	if v.OnInvalid != "" && v.OnInvalid != OnInvalidReject && v.OnInvalid != OnInvalidDLQ {
		errs = append(errs, fmt.Errorf("validate.on_invalid: unknown action %q (want reject or dlq)", v.OnInvalid))
	}
	if v.OnInvalid != "" && len(v.Schemas) == 0 {
		errs = append(errs, errors.New("validate.schemas: required by validate"))
	}
	for _, glob := range slices.Sorted(maps.Keys(v.Schemas)) {
		if _, err := path.Match(glob, ""); err != nil || glob == "" {
			errs = append(errs, fmt.Errorf("validate.schemas: invalid glob %q", glob))
		}
		if v.Schemas[glob] == "" {
			errs = append(errs, fmt.Errorf("validate.schemas[%s]: no schema file", glob))
		}
	}
	return errs
}

// load reads and compiles every schema file, relative paths against dir,
// and orders the rules most specific first. Errors name the glob, the file
// and the problem.
func (v *Validation) load(dir string) []error {
	var errs []error
	v.rules = v.rules[:0]
	for _, glob := range slices.Sorted(maps.Keys(v.Schemas)) {
		file := v.Schemas[glob]
		loc := file
		if !filepath.IsAbs(loc) {
			loc = filepath.Join(dir, loc)
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		schema, err := c.Compile(loc)
		if err != nil {
			errs = append(errs, fmt.Errorf("validate.schemas[%s]: %s: %s", glob, file, compileProblem(err)))
			continue
		}
		v.rules = append(v.rules, &schemaRule{glob: glob, file: file, schema: schema})
	}
	slices.SortStableFunc(v.rules, func(a, b *schemaRule) int { return specificity(b.glob) - specificity(a.glob) })
	return errs
}

// compileProblem describes why a schema file did not compile, without the
// file's URL (the caller names the file): a file that cannot be read or
// parsed, or a schema that breaks the 2020-12 metaschema, by its
// violations.
func compileProblem(err error) string {
	var load *jsonschema.LoadURLError
	var meta *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	switch {
	case errors.As(err, &load):
		return oneLine(load.Err.Error())
	case errors.As(err, &meta) && errors.As(meta.Err, &ve):
		var vs []topics.Violation
		collectViolations(ve, &vs)
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = fmt.Sprintf("at %q: %s", cmp.Or(v.Path, "/"), v.Message)
		}
		return "not a valid JSON Schema: " + strings.Join(parts, "; ")
	default:
		return oneLine(err.Error())
	}
}

// specificity ranks globs: a name without wildcards above every pattern,
// then patterns by their count of literal characters ("*" counts none).
func specificity(glob string) int {
	if !strings.ContainsAny(glob, `*?[\`) {
		return 1 << 20
	}
	n := 0
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '*', '?':
		case '[':
			// A class matches one character: count it as one literal.
			if end := strings.IndexByte(glob[i:], ']'); end > 0 {
				i += end
			}
			n++
		case '\\':
			i++
			n++
		default:
			n++
		}
	}
	return n
}

// rule returns the rule applying to eventType, nil when none does.
func (v Validation) rule(eventType string) *schemaRule {
	for _, r := range v.rules {
		if ok, _ := path.Match(r.glob, eventType); ok {
			return r
		}
	}
	return nil
}

// check returns the violations of body, an event of eventType (isJSON says
// whether topics.CheckJSON passed it), sorted by path and at most maxViolations;
// none when it is valid or no schema applies.
func (v Validation) check(eventType string, body []byte, isJSON bool) []topics.Violation {
	r := v.rule(eventType)
	if r == nil {
		return nil
	}
	if !isJSON {
		return []topics.Violation{{Path: "", Message: errNotJSON}}
	}
	err := r.schema.Validate(decodeJSON(body))
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []topics.Violation{{Path: "", Message: oneLine(err.Error())}}
	}
	var out []topics.Violation
	collectViolations(ve, &out)
	slices.SortFunc(out, compareViolations)
	out = slices.Compact(out)
	return out[:min(len(out), maxViolations)]
}

// decodeJSON turns body, which topics.CheckJSON passed, into the form the
// validator takes: map[string]any, []any, string, json.Number (exact, so
// that integers stay integers), bool and nil; of a key written twice the
// last counts, as in encoding/json. It does what jsonschema.UnmarshalJSON
// does on a body already known to be valid JSON, in less of its time
// (BENCHMARKS.md). It reads body once, keeping the open arrays and objects
// on a stack: its time is linear in the body's size at any nesting (a
// decoder that finds a value's end before descending into it reads each
// byte once per enclosing level).
func decodeJSON(body []byte) any {
	doc := string(body) // one copy: strings and numbers are slices of it
	type open struct {
		arr    []any
		obj    map[string]any // nil for an array
		key    string
		hasKey bool // key names the member whose value comes next
	}
	stack := make([]open, 0, 16)
	for i := 0; ; {
		// Between tokens of valid JSON there are only spaces, commas and colons.
		for doc[i] <= ' ' || doc[i] == ',' || doc[i] == ':' {
			i++
		}
		var v any
		switch c := doc[i]; c {
		case '{':
			stack = append(stack, open{obj: make(map[string]any, 8)})
			i++
			continue
		case '[':
			stack = append(stack, open{arr: make([]any, 0, 8)})
			i++
			continue
		case '}', ']':
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if v = top.arr; top.obj != nil {
				v = top.obj
			}
			i++
		case '"':
			end, escaped := i+1, false
			for doc[end] != '"' {
				if doc[end] == '\\' {
					end, escaped = end+1, true
				}
				end++
			}
			s := doc[i+1 : end]
			if escaped {
				s = gjson.Parse(doc[i : end+1]).Str
			}
			i = end + 1
			if n := len(stack); n > 0 && stack[n-1].obj != nil && !stack[n-1].hasKey {
				stack[n-1].key, stack[n-1].hasKey = validUTF8(s), true
				continue
			}
			v = validUTF8(s)
		case 't':
			v, i = true, i+len("true")
		case 'f':
			v, i = false, i+len("false")
		case 'n':
			v, i = nil, i+len("null")
		default:
			end := i + 1
			for end < len(doc) && strings.IndexByte("0123456789+-.eE", doc[end]) >= 0 {
				end++
			}
			v, i = json.Number(doc[i:end]), end
		}
		n := len(stack)
		switch {
		case n == 0:
			return v
		case stack[n-1].obj != nil:
			stack[n-1].obj[stack[n-1].key] = v
			stack[n-1].hasKey = false
		default:
			stack[n-1].arr = append(stack[n-1].arr, v)
		}
	}
}

// validUTF8 replaces each byte of s that is not UTF-8 with U+FFFD, as
// encoding/json does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s))
}

// printer renders the library's messages in English.
var printer = message.NewPrinter(language.English)

// collectViolations appends the leaves of e's tree: the failures that say
// what is wrong where, not the groups (allOf, $ref) that contain them.
func collectViolations(e *jsonschema.ValidationError, out *[]topics.Violation) {
	if len(e.Causes) == 0 {
		*out = append(*out, topics.Violation{Path: jsonPointer(e.InstanceLocation), Message: shorten(e.ErrorKind.LocalizedString(printer))})
		return
	}
	for _, c := range e.Causes {
		collectViolations(c, out)
	}
}

// maxMessage bounds a violation's message, which can quote the value at
// fault: the violations travel in a record header and in the 422 answer.
const maxMessage = 200

// shorten cuts msg to maxMessage bytes at a character boundary, marking
// the cut with "…".
func shorten(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

func compareViolations(a, b topics.Violation) int {
	return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Message, b.Message))
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// jsonPointer encodes tokens as a JSON Pointer (RFC 6901).
func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
