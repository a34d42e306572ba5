package expr

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// Filter is a compiled filter: a CEL expression of type bool. It is safe
// for concurrent use.
type Filter struct {
	src string
	prg cel.Program
}

// CompileFilter compiles src. It returns an *Error when src does not
// parse, does not type-check to bool, or exceeds a bound.
func CompileFilter(src string) (*Filter, error) {
	ast, prg, err := compile(src)
	if err != nil {
		return nil, err
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		msg := "a filter must be a bool, this one is " + article(t)
		if t.IsExactType(cel.DynType) {
			msg += ": compare it, as in data.draft == true"
		}
		return nil, &Error{Line: 1, Column: 1, Msg: msg}
	}
	return &Filter{src: src, prg: prg}, nil
}

// Match evaluates the filter on in. An error is an evaluation error (a
// missing field without has(), a type mismatch, the runtime cost limit):
// the caller counts it as no match.
func (f *Filter) Match(in *Input) (bool, error) {
	out, _, err := f.prg.Eval(&meter{in: in})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("filter: value is %s, not bool", out.Type())
	}
	return bool(b), nil
}

// String returns the filter's source.
func (f *Filter) String() string { return f.src }
