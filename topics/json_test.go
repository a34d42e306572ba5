package topics

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func nested(depth int, inner string) string {
	return strings.Repeat(`[{"a":`, depth/2) + strings.Repeat("[", depth%2) + inner +
		strings.Repeat("]", depth%2) + strings.Repeat("}]", depth/2)
}

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error // nil, ErrJSONDepth, or errJSONSyntax
	}{
		{`{}`, nil},
		{` [ ] `, nil},
		{`{"a":[1,-0.5e+3,"x\u00e9\n",true,false,null,{}],"b":{"c":"\"\\\/"}}`, nil},
		{"\"\xff\"", nil}, // encoding/json takes invalid UTF-8 in strings
		{`0`, nil},
		{nested(MaxJSONDepth, "1"), nil},
		{nested(MaxJSONDepth+1, "1"), ErrJSONDepth},
		{strings.Repeat("[", 1<<20), ErrJSONDepth},
		{strings.Repeat("[", MaxJSONDepth+1) + "}", ErrJSONDepth}, // depth is decided first
		{``, errJSONSyntax},
		{` `, errJSONSyntax},
		{`{"a":1},"id":"stripe:evt_forged"`, errJSONSyntax},
		{`{"a":1}{}`, errJSONSyntax},
		{`[1,]`, errJSONSyntax},
		{`{"a":1,}`, errJSONSyntax},
		{`{"a" 1}`, errJSONSyntax},
		{`{1:1}`, errJSONSyntax},
		{`[1}`, errJSONSyntax},
		{`{"a":1]`, errJSONSyntax},
		{`01`, errJSONSyntax},
		{`-`, errJSONSyntax},
		{`1.`, errJSONSyntax},
		{`1e`, errJSONSyntax},
		{`+1`, errJSONSyntax},
		{`tru`, errJSONSyntax},
		{`"\x"`, errJSONSyntax},
		{`"\u12g4"`, errJSONSyntax},
		{"\"a\tb\"", errJSONSyntax},
		{`"abc`, errJSONSyntax},
		{"[" + strings.Repeat("1,", 10) + "]", errJSONSyntax},
		// Strings are scanned 8 bytes at a time: what stops a scan at each offset.
		{`"` + strings.Repeat("\xa2\xdc\x9f é", 5) + `"`, nil},
		{`"0123456789abc\"\\def"`, nil},
		{`"0123456789abcdefgh` + "\x1f" + `"`, errJSONSyntax},
		{`"0123456789abcdefgh` + "\x00" + `"`, errJSONSyntax},
		{`"0123456789abcdefgh`, errJSONSyntax},
		{`"0123456789abcdef"` + "\x7f", errJSONSyntax},
	} {
		name := tc.in
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			if got := CheckJSON([]byte(tc.in)); !errors.Is(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzCheckJSON: CheckJSON never panics, and on input nested at most
// MaxJSONDepth deep it decides as encoding/json's Valid does; ErrJSONDepth
// only for input that opens more than MaxJSONDepth levels.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"\u00e9"]}`, `[1,]`, `"\ud800"`, `-0`, nested(20, `{}`), "{\"\xff\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckJSON(b)
		if errors.Is(err, ErrJSONDepth) {
			return
		}
		if got, want := err == nil, json.Valid(b); got != want {
			t.Fatalf("CheckJSON(%q) = %v, json.Valid %v", b, err, want)
		}
	})
}

func TestCheckJSONDepthIsOpenLevels(t *testing.T) {
	// Many levels opened and closed in turn are no deeper than one.
	b := []byte("[" + strings.Repeat(nested(MaxJSONDepth-1, "0")+",", 100) + "0]")
	if err := CheckJSON(b); err != nil {
		t.Errorf("got %v, want nil", err)
	}
}

// BenchmarkCheckJSON compares CheckJSON with gjson.Valid, which the
// receiver and the processor used before, on a typical webhook body.
func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2022-11-15","created":1686089970,` +
		`"data":{"object":{"id":"cs_test_a1","object":"checkout.session","amount_subtotal":2198,"amount_total":2198,` +
		`"currency":"usd","customer_details":{"email":"jenny.rosen@example.com","name":"Jenny Rosen","phone":null,` +
		`"address":{"city":"South San Francisco","country":"US","line1":"354 Oyster Point Blvd","postal_code":"94080"}},` +
		`"metadata":{"order":"6735","note":"caf\u00e9 \"fast\""},"payment_status":"paid","status":"complete",` +
		`"line_items":[{"price":"price_1","quantity":2,"amount":1099.0},{"price":"price_2","quantity":1,"amount":-1.5e2}]}},` +
		`"livemode":false,"pending_webhooks":2,"request":{"id":null,"idempotency_key":"a3d5f1e2"},"type":"checkout.session.completed"}`)
	b.Run("CheckJSON", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if CheckJSON(body) != nil {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("gjson.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !gjson.ValidBytes(body) {
				b.Fatal("invalid")
			}
		}
	})
}
