package expr

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// Transform is a compiled transform: a CEL expression whose value, as
// JSON, is delivered instead of the envelope. It is safe for concurrent
// use.
type Transform struct {
	src string
	prg cel.Program
}

// CompileTransform compiles src. It returns an *Error when src does not
// parse or type-check, or exceeds a bound.
func CompileTransform(src string) (*Transform, error) {
	ast, prg, err := compile(src)
	if err != nil {
		return nil, err
	}
	if t := ast.OutputType(); t.Kind() == types.TypeKind {
		return nil, &Error{Line: 1, Column: 1, Msg: "a transform's value must be JSON, this one is " + article(t)}
	}
	return &Transform{src: src, prg: prg}, nil
}

// Apply evaluates the transform on in and returns its value as compact
// JSON: maps as objects (keys sorted), lists as arrays, timestamps as RFC
// 3339 strings, durations as seconds like "1.5s", bytes as base64, ints as
// integers. An error is an evaluation error, a value JSON cannot hold (a
// type, NaN), or the cost limit reached, the JSON's included.
func (t *Transform) Apply(in *Input) ([]byte, error) {
	m := &meter{in: in}
	out, _, err := t.prg.Eval(m)
	if err != nil {
		return nil, err
	}
	return m.appendJSON(nil, out)
}

// String returns the transform's source.
func (t *Transform) String() string { return t.src }
