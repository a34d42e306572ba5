package ingest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// fieldForm is the form of a compiled event_id / event_type spec.
type fieldForm uint8

const (
	fieldFormHeader fieldForm = iota + 1
	fieldFormJSON
	fieldFormTemplate
	fieldFormGitLab
)

// Field is a compiled event_id / event_type spec. The zero value is not
// usable; build one with ParseField. A Field is immutable and safe for
// concurrent use.
type Field struct {
	form fieldForm
	// parts holds the single part of the header: and json: forms, and the
	// parts of a template in order.
	parts []fieldPart
	// headers are the canonical names of the headers the field reads.
	headers []string
}

// fieldPartKind says what a template part is.
type fieldPartKind uint8

const (
	fieldPartLiteral fieldPartKind = iota
	fieldPartHeader
	fieldPartJSON
)

// fieldPart is one part of a Field: literal text, a header or a JSON path.
type fieldPart struct {
	kind fieldPartKind
	// text is the literal text, or the canonical header name.
	text string
	// path is the JSON path to read.
	path jsonPath
}

// value returns the part's text, which may alias p.Body.
func (fp *fieldPart) value(p *Payload) (string, bool) {
	switch fp.kind {
	case fieldPartLiteral:
		return fp.text, true
	case fieldPartHeader:
		v := fieldHeaderValue(p.Header, fp.text)
		return v, v != ""
	default:
		if !p.JSON {
			return "", false
		}
		return fp.path.lookup(p.Body)
	}
}

// ParseField compiles an event_id / event_type spec:
//
//	header:NAME             the first value of header NAME
//	json:path.to.field      a JSON field; numeric segments index arrays
//	template:TEXT           literal text with {json.path} and {header:Name} parts
//	preset:gitlab           GitLab content keys (see gitlabKey)
//
// JSON paths are dot paths taken literally: gjson's query and modifier
// syntax (*, ?, #, @, |, ! ...) does not apply. The empty spec returns
// (nil, nil): the default applies. Errors are one line naming the problem.
func ParseField(spec string) (*Field, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	form, arg, found := strings.Cut(spec, ":")
	if !found {
		return nil, fmt.Errorf("unknown form %q (want header:, json:, template: or preset:gitlab)", spec)
	}
	switch form {
	case "header":
		part, err := parseHeaderPart(arg)
		if err != nil {
			return nil, err
		}
		return &Field{form: fieldFormHeader, parts: []fieldPart{part}, headers: []string{part.text}}, nil
	case "json":
		part, err := parseJSONPart(arg)
		if err != nil {
			return nil, err
		}
		return &Field{form: fieldFormJSON, parts: []fieldPart{part}}, nil
	case "template":
		return parseTemplate(arg)
	case "preset":
		switch arg {
		case "gitlab":
			return &Field{form: fieldFormGitLab, headers: []string{gitlabUUIDHeader}}, nil
		case "":
			return nil, errors.New("preset: empty name (want preset:gitlab)")
		default:
			return nil, fmt.Errorf("unknown preset %q (want preset:gitlab)", arg)
		}
	default:
		return nil, fmt.Errorf("unknown form %q (want header:, json:, template: or preset:gitlab)", form+":")
	}
}

// Value extracts the field; ok is false when any part is missing or empty.
// JSON null, objects and arrays count as missing; numbers give their literal
// text, booleans true or false.
func (f *Field) Value(p *Payload) (string, bool) {
	v, ok := f.value(p)
	if !ok {
		return "", false
	}
	return detach(v, f.fromBody()), true
}

// fromBody reports whether f's values point into the request body: only
// the json: form's do. A template or preset:gitlab joins its parts into a
// new string, and a header's value is the request's.
func (f *Field) fromBody() bool {
	return f != nil && f.form == fieldFormJSON
}

// value is Value without the copy: the result may alias p.Body.
func (f *Field) value(p *Payload) (string, bool) {
	if f == nil {
		return "", false
	}
	switch f.form {
	case fieldFormHeader, fieldFormJSON:
		return f.parts[0].value(p)
	case fieldFormTemplate:
		return f.template(p)
	case fieldFormGitLab:
		return gitlabKey(p)
	}
	return "", false
}

// Headers names the headers the field reads (canonical form), for the
// record's header allow-list.
func (f *Field) Headers() []string {
	if f == nil {
		return nil
	}
	return slices.Clone(f.headers)
}
