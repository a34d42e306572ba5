package expr

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/hookstream/hookstream/topics"
)

// parseJSON decodes one JSON value into CEL values in one pass, without
// the intermediate values and the separate validating scan of
// encoding/json (a GitHub push parses about four times faster): objects
// become maps of strings, arrays lists, numbers ints when they are
// integral and fit in 64 bits, else doubles. Strings are decoded as
// encoding/json does (invalid UTF-8 and lone surrogates replaced by
// U+FFFD; the last of duplicate keys wins). Anything but one value within
// topics.MaxJSONDepth, whitespace around, is an error.
func parseJSON(b []byte) (ref.Val, error) {
	p := jsonParser{b: b}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, p.fail()
	}
	return v, nil
}

var errJSON = errors.New("invalid JSON")

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) fail() error { return errJSON }

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (ref.Val, error) {
	if p.i >= len(p.b) {
		return nil, p.fail()
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if depth == topics.MaxJSONDepth {
			return nil, p.fail()
		}
		return p.object(depth + 1)
	case c == '[':
		if depth == topics.MaxJSONDepth {
			return nil, p.fail()
		}
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return types.String(s), nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true", types.True)
	case c == 'f':
		return p.literal("false", types.False)
	case c == 'n':
		return p.literal("null", types.NullValue)
	}
	return nil, p.fail()
}

func (p *jsonParser) literal(word string, v ref.Val) (ref.Val, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.fail()
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) object(depth int) (ref.Val, error) {
	p.i++ // {
	m := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return types.NewStringInterfaceMap(types.DefaultTypeAdapter, m), nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.fail()
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.fail()
		}
		p.i++
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.space()
		case '}':
			p.i++
			return types.NewStringInterfaceMap(types.DefaultTypeAdapter, m), nil
		default:
			return nil, p.fail()
		}
	}
}

func (p *jsonParser) array(depth int) (ref.Val, error) {
	p.i++ // [
	var l []ref.Val
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return types.NewRefValList(types.DefaultTypeAdapter, []ref.Val{}), nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		l = append(l, v)
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.space()
		case ']':
			p.i++
			return types.NewRefValList(types.DefaultTypeAdapter, l), nil
		default:
			return nil, p.fail()
		}
	}
}

func (p *jsonParser) number() (ref.Val, error) {
	start := p.i
	integral := true
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() bool {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n > 0
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if !digits() {
		return nil, p.fail()
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		integral = false
		if !digits() {
			return nil, p.fail()
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		integral = false
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !digits() {
			return nil, p.fail()
		}
	}
	text := string(p.b[start:p.i])
	if integral {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return types.Int(n), nil
		}
	}
	// Out of range, ParseFloat returns ±Inf: a JSON number too large for
	// a double compares as the infinity it rounds to.
	f, _ := strconv.ParseFloat(text, 64)
	return types.Double(f), nil
}

// str decodes the string at p.i, its opening quote.
func (p *jsonParser) str() (string, error) {
	p.i++ // "
	start := p.i
	// Fast path: no escapes, valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return string(appendValidUTF8(nil, s)), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.fail()
		}
		p.i++
	}
	out := appendValidUTF8(make([]byte, 0, p.i-start+16), p.b[start:p.i])
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.fail()
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", p.fail()
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail()
				}
				if utf16.IsSurrogate(r) {
					// A pair, or U+FFFD for a lone half.
					save := p.i
					if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						p.i += 2
						if r2, ok := p.hex4(); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								out = utf8.AppendRune(out, d)
								continue
							}
						}
					}
					p.i = save
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", p.fail()
			}
		default:
			// A run of bytes up to the next quote, escape or control.
			j := p.i
			for j < len(p.b) && p.b[j] != '"' && p.b[j] != '\\' && p.b[j] >= 0x20 {
				j++
			}
			out = appendValidUTF8(out, p.b[p.i:j])
			p.i = j
		}
	}
	return "", p.fail()
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}

// appendValidUTF8 appends s with each invalid byte replaced by U+FFFD, as
// encoding/json decodes.
func appendValidUTF8(out, s []byte) []byte {
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			out = append(out, "\uFFFD"...)
		} else {
			out = append(out, s[:size]...)
		}
		s = s[size:]
	}
	return out
}
