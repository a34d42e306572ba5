package ingest

import (
	"fmt"
	"slices"
	"strings"
)

// parseTemplate compiles the TEXT of template:TEXT.
func parseTemplate(tmpl string) (*Field, error) {
	f := &Field{form: fieldFormTemplate}
	dynamic := false
	for i := 0; i < len(tmpl); {
		switch tmpl[i] {
		case '{':
			end := strings.IndexAny(tmpl[i+1:], "{}")
			if end < 0 || tmpl[i+1+end] == '{' {
				return nil, fmt.Errorf("template %q: unbalanced braces: %q at byte %d is not closed", tmpl, "{", i)
			}
			inner := tmpl[i+1 : i+1+end]
			if inner == "" {
				return nil, fmt.Errorf("template %q: empty name in {} at byte %d", tmpl, i)
			}
			var part fieldPart
			var err error
			if name, ok := strings.CutPrefix(inner, "header:"); ok {
				part, err = parseHeaderPart(name)
				if err == nil && !slices.Contains(f.headers, part.text) {
					f.headers = append(f.headers, part.text)
				}
			} else {
				part, err = parseJSONPart(inner)
			}
			if err != nil {
				return nil, fmt.Errorf("template %q: %w", tmpl, err)
			}
			f.parts = append(f.parts, part)
			dynamic = true
			i += end + 2
		case '}':
			return nil, fmt.Errorf("template %q: unbalanced braces: %q at byte %d has no %q", tmpl, "}", i, "{")
		default:
			end := strings.IndexAny(tmpl[i:], "{}")
			if end < 0 {
				end = len(tmpl) - i
			}
			f.parts = append(f.parts, fieldPart{kind: fieldPartLiteral, text: tmpl[i : i+end]})
			i += end
		}
	}
	if !dynamic {
		return nil, fmt.Errorf("template %q: no {json.path} or {header:Name} part", tmpl)
	}
	return f, nil
}

// template renders a template field into one new string.
func (f *Field) template(p *Payload) (string, bool) {
	var buf [8]string
	vals := buf[:0]
	for i := range f.parts {
		v, ok := f.parts[i].value(p)
		if !ok || v == "" {
			return "", false
		}
		vals = append(vals, v)
	}
	return joinFieldValues(vals, ""), true
}

// joinFieldValues joins vals with sep in one allocation.
func joinFieldValues(vals []string, sep string) string {
	if len(vals) == 0 {
		return ""
	}
	n := len(sep) * (len(vals) - 1)
	for _, v := range vals {
		n += len(v)
	}
	var b strings.Builder
	b.Grow(n)
	for i, v := range vals {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(v)
	}
	return b.String()
}
