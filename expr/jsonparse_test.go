package expr

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"

	"github.com/hookstream/hookstream/topics"
)

// FuzzParseJSON: parseJSON accepts exactly what encoding/json does (within
// topics.MaxJSONDepth) and decodes it to the same values.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		pushBody, `{}`, `[]`, ` {"a" : [1, -0, 2.5e3, 1E-2, 9223372036854775808, -9223372036854775808, 1e400] } `,
		`"\u00e9\ud83d\ude00\ud800x\\\/\b\f\n\r\t\"\u0041"`, "\"\xff\xfe ok \xc3\"", `{"a":1,"a":2}`,
		`[true,false,null]`, `01`, `1.`, `-`, `{"a"}`, `[1,]`, `"\x"`, "\"\t\"", `nul`, `{} x`,
		strings.Repeat("[", topics.MaxJSONDepth) + strings.Repeat("]", topics.MaxJSONDepth),
		strings.Repeat("[", topics.MaxJSONDepth+1) + strings.Repeat("]", topics.MaxJSONDepth+1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseJSON(b)
		valid := json.Valid(b) && topics.CheckJSON(b) == nil
		if (err == nil) != valid {
			t.Fatalf("parseJSON(%q) error %v, encoding/json valid %v", b, err, valid)
		}
		if !valid {
			return
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		want := fromJSON(v)
		if got.Equal(want) != types.True {
			t.Fatalf("parseJSON(%q) = %v, encoding/json %v", b, got, want)
		}
	})
}
