package ingest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hookstream/hookstream/topics"
)

// checkoutBody is a checkout.session.completed event of about 1 KiB that
// testdata/checkout.schema.json accepts.
const checkoutBody = `{"id":"evt_1PqR2sT3uV4wX5yZ","object":"event","type":"checkout.session.completed","created":1732356000,"livemode":false,` +
	`"data":{"object":{"id":"cs_test_a1B2c3D4e5F6g7H8i9J0","object":"checkout.session","amount_total":4200,"currency":"eur","status":"complete",` +
	`"payment_status":"paid","customer_details":{"email":"ada@example.com","name":"Ada Lovelace","address":{"city":"London","country":"GB",` +
	`"line1":"12 St James's Square","postal_code":"SW1Y 4JH"}},"line_items":[{"price":"price_1AbC","quantity":2,"amount":2000},` +
	`{"price":"price_2DeF","quantity":1,"amount":200}],"metadata":{"order":"ord_8812","channel":"web","campaign":"winter-2026",` +
	`"note":"leave at the door, ring twice; the dog is friendly",` +
	`"gift":"Happy birthday, Grace! A little something for the workshop: may every compile be clean and every review kind. With love from all of us.!!!!"}}},"request":{"id":"req_Zy9Xw8Vu7Ts6","idempotency_key":"f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9"},` +
	`"pending_webhooks":1,"api_version":"2024-06-20","account":"acct_1Nv0FGQ9RKHgCVdK"}`

// writeSourcesFile writes a sources document and the schema files it
// names (relative to the document's directory), and loads it.
func writeSourcesFile(t testing.TB, doc string, schemas map[string]string) (Sources, error) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range schemas {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "sources.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return LoadSources(path, lookupFrom(nil))
}

func readCheckoutSchema(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/checkout.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const billingDoc = `
sources:
  billing:
    event_type: json:type
    validate:
      schemas: {"checkout.*": schemas/checkout.json, "checkout.session.expired": schemas/expired.json, "*": schemas/any.json}
      on_invalid: reject
  plain:
    event_type: json:type
    validate:
      schemas: {"invoice.*": schemas/any.json}
`

// billingSchemas: any.json wants an object with a string "type"; expired.json
// wants "expired_at".
func billingSchemas(t *testing.T) map[string]string {
	return map[string]string{
		"schemas/checkout.json": readCheckoutSchema(t),
		"schemas/expired.json":  `{"type":"object","required":["expired_at"]}`,
		"schemas/any.json":      `{"type":"object","required":["type"],"properties":{"type":{"type":"string"}}}`,
	}
}

func TestSchemaSelection(t *testing.T) {
	s, err := writeSourcesFile(t, billingDoc, billingSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	billing, plain := s.Sources["billing"].Validate, s.Sources["plain"].Validate
	tests := []struct {
		name      string
		v         Validation
		eventType string
		want      string // schema file, "" for none
	}{
		{"glob", billing, "checkout.session.completed", "schemas/checkout.json"},
		{"exact name beats a glob", billing, "checkout.session.expired", "schemas/expired.json"},
		{"unknown type falls to *", billing, "customer.created", "schemas/any.json"},
		{"no glob matches", plain, "customer.created", ""},
		{"only glob matches", plain, "invoice.paid", "schemas/any.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if r := tt.v.rule(tt.eventType); r != nil {
				got = r.file
			}
			if got != tt.want {
				t.Errorf("schema for %q: got %q, want %q", tt.eventType, got, tt.want)
			}
		})
	}
}

func TestValidateBody(t *testing.T) {
	s, err := writeSourcesFile(t, billingDoc, billingSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	v := s.Sources["billing"].Validate
	manyBad := strings.NewReplacer(
		`"evt_1PqR2sT3uV4wX5yZ"`, `"x"`, // pattern
		`"created":1732356000`, `"created":-1`, // minimum
		`"livemode":false`, `"livemode":"no"`, // type
		`"amount_total":4200`, `"amount_total":"4200"`, // type
		`"currency":"eur"`, `"currency":"EURO"`, // pattern
		`"status":"complete"`, `"status":"done"`, // enum
		`"payment_status":"paid"`, `"payment_status":"free"`, // enum
		`"email":"ada@example.com"`, `"email":1`, // type
		`"country":"GB"`, `"country":"GBR"`, // maxLength
		`"quantity":2`, `"quantity":0`, // minimum
		`"quantity":1`, `"quantity":"1"`, // type
		`"order":"ord_8812"`, `"order":8812`, // additionalProperties
	).Replace(checkoutBody)
	tests := []struct {
		name      string
		eventType string
		body      string
		want      []topics.Violation // nil: valid
		wantN     int                // when want is nil and the body is invalid
	}{
		{name: "valid", eventType: "checkout.session.completed", body: checkoutBody},
		{name: "one violation", eventType: "checkout.session.completed",
			body: strings.Replace(checkoutBody, `"amount_total":4200`, `"amount_total":-5`, 1),
			want: []topics.Violation{{Path: "/data/object/amount_total", Message: "minimum: got -5, want 0"}}},
		{name: "missing required", eventType: "checkout.session.completed",
			body: strings.Replace(checkoutBody, `"created":1732356000,`, ``, 1),
			want: []topics.Violation{{Path: "", Message: "missing property 'created'"}}},
		{name: "many violations, at most 10", eventType: "checkout.session.completed", body: manyBad, wantN: maxViolations},
		{name: "unknown type checked by *", eventType: "customer.created", body: `{"type":7}`,
			want: []topics.Violation{{Path: "/type", Message: "got number, want string"}}},
		{name: "no schema for the type", eventType: "customer.created", body: `{"type":"customer.created"}`},
		{name: "long value quoted", eventType: "checkout.session.completed",
			body: strings.Replace(checkoutBody, `"currency":"eur"`, `"currency":"`+strings.Repeat("é", 300)+`"`, 1),
			want: []topics.Violation{{Path: "/data/object/currency", Message: "'" + strings.Repeat("é", 99) + "…"}}},
		{name: "not JSON", eventType: "checkout.session.completed", body: `amount=5`,
			want: []topics.Violation{{Path: "", Message: "body is not JSON"}}},
	}
	// "no schema for the type" runs against a source whose globs do not
	// match: the plain source.
	plain := s.Sources["plain"].Validate
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on := v
			if tt.name == "no schema for the type" {
				on = plain
			}
			got := on.check(tt.eventType, []byte(tt.body), looksJSON(tt.body))
			switch {
			case tt.wantN > 0:
				if len(got) != tt.wantN {
					t.Fatalf("violations: got %d %v, want %d", len(got), got, tt.wantN)
				}
				for _, vi := range got {
					if vi.Message == "" {
						t.Errorf("violation at %q has no message", vi.Path)
					}
				}
				if !slices.IsSortedFunc(got, compareViolations) {
					t.Errorf("violations not in path order: %v", got)
				}
			case !slices.Equal(got, tt.want):
				t.Errorf("violations: got %v, want %v", got, tt.want)
			}
		})
	}
}

func looksJSON(body string) bool { return strings.HasPrefix(body, "{") }

func TestValidateConfigErrors(t *testing.T) {
	anySchema := map[string]string{"any.json": `{"type":"object"}`}
	tests := []struct {
		name    string
		doc     string
		schemas map[string]string
		want    string
	}{
		{"schema does not compile", `sources: {a: {validate: {schemas: {"*": bad.json}}}}`,
			map[string]string{"bad.json": `{"type":"objekt"}`}, "sources.a.validate.schemas[*]: bad.json: "},
		{"schema is not JSON", `sources: {a: {validate: {schemas: {"*": bad.json}}}}`,
			map[string]string{"bad.json": `{"type":`}, "sources.a.validate.schemas[*]: bad.json: "},
		{"schema file missing", `sources: {a: {validate: {schemas: {"*": nope.json}}}}`,
			nil, "sources.a.validate.schemas[*]: nope.json: "},
		{"no schemas", `sources: {a: {validate: {on_invalid: dlq}}}`, nil, "sources.a.validate.schemas: required"},
		{"bad action", `sources: {a: {validate: {schemas: {"*": any.json}, on_invalid: drop}}}`, anySchema,
			`sources.a.validate.on_invalid: unknown action "drop" (want reject or dlq)`},
		{"bad glob", `sources: {a: {validate: {schemas: {"[": any.json}}}}`, anySchema, `sources.a.validate.schemas: invalid glob "["`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := writeSourcesFile(t, tt.doc, tt.schemas)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error: got %v, want one containing %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "HOOKSTREAM_CONFIG: ") {
				t.Errorf("error: got %q, want it to name HOOKSTREAM_CONFIG", err)
			}
		})
	}
}

// TestAbsoluteSchemaPath: an absolute path is used as it is.
func TestAbsoluteSchemaPath(t *testing.T) {
	abs, err := filepath.Abs("testdata/checkout.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := writeSourcesFile(t, fmt.Sprintf("sources: {a: {validate: {schemas: {\"*\": %q}}}}", abs), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sources["a"].Validate.check("x", []byte(checkoutBody), true); len(got) != 0 {
		t.Errorf("violations: got %v, want none", got)
	}
}

// BenchmarkValidate measures the schema check of a 1 KiB
// checkout.session.completed event against testdata/checkout.schema.json
// (nested objects, enums, patterns, required fields, an array of items),
// valid and with three violations; decode is the JSON decoding alone that
// the check starts with.
func BenchmarkValidate(b *testing.B) {
	if len(checkoutBody) != 1024 {
		b.Fatalf("benchmark body: got %d bytes, want 1024", len(checkoutBody))
	}
	s, err := writeSourcesFile(b, `sources: {billing: {validate: {schemas: {"checkout.*": checkout.json}}}}`,
		map[string]string{"checkout.json": readCheckoutSchema(b)})
	if err != nil {
		b.Fatal(err)
	}
	v := s.Sources["billing"].Validate
	invalid := strings.NewReplacer(`"currency":"eur"`, `"currency":"EUR"`, `"status":"complete"`, `"status":"done!!!!"`,
		`"quantity":1`, `"quantity":0`).Replace(checkoutBody)
	for _, bc := range []struct {
		name, body string
		want       int
	}{{"valid", checkoutBody, 0}, {"invalid", invalid, 3}} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			if got := v.check("checkout.session.completed", body, true); len(got) != bc.want {
				b.Fatalf("violations: got %v, want %d", got, bc.want)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				v.check("checkout.session.completed", body, true)
			}
		})
	}
	b.Run("decode", func(b *testing.B) {
		body := []byte(checkoutBody)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			decodeJSON(body)
		}
	})
	b.Run("deep", func(b *testing.B) {
		body := deepBody(1 << 20)
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			decodeJSON(body)
		}
	})
	b.Run("decode-encoding-json", func(b *testing.B) {
		body := []byte(checkoutBody)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// deepBody is a body of about n bytes nested topics.MaxJSONDepth deep
// whose innermost array holds most of its bytes: a decoder that finds
// each value's end before descending into it reads those bytes once per
// level.
func deepBody(n int) []byte {
	const levels = topics.MaxJSONDepth - 2 // the object and the innermost array
	inner := strings.Repeat("12345678,", n/9)
	return []byte(`{"type":7,"x":` + strings.Repeat("[", levels) + "[" + inner + "0]" + strings.Repeat("]", levels) + "}")
}

// TestValidateLargeDeepBody: a body of a mebibyte nested as deep as the
// receiver allows gets its answer (BenchmarkValidate/deep records the
// work it takes).
func TestValidateLargeDeepBody(t *testing.T) {
	s, err := writeSourcesFile(t, billingDoc, billingSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	body := deepBody(1 << 20)
	if err := topics.CheckJSON(body); err != nil {
		t.Fatalf("test body: %v", err)
	}
	got := s.Sources["billing"].Validate.check("customer.created", body, true)
	if want := []topics.Violation{{Path: "/type", Message: "got number, want string"}}; !slices.Equal(got, want) {
		t.Errorf("violations: got %v, want %v", got, want)
	}
}

// FuzzDecodeJSON checks decodeJSON against the library's own decoder.
// Invariants: never panics; on valid JSON it gives what
// jsonschema.UnmarshalJSON gives (json.Number for numbers, the last of
// duplicate keys).
func FuzzDecodeJSON(f *testing.F) {
	f.Add(checkoutBody)
	f.Add(`{"a":1,"a":[true,false,null,"x\u00e9\n",1e400,-0.5]}`)
	f.Add(`[{}, [], "", 12345678901234567890123]`)
	f.Fuzz(func(t *testing.T, doc string) {
		if topics.CheckJSON([]byte(doc)) != nil {
			return
		}
		want, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		if err != nil {
			t.Fatalf("jsonschema.UnmarshalJSON(%q): %v, but CheckJSON passed it", doc, err)
		}
		if got := decodeJSON([]byte(doc)); !reflect.DeepEqual(got, want) {
			t.Errorf("decodeJSON(%q): got %#v, want %#v", doc, got, want)
		}
	})
}
