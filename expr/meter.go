package expr

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// cel-go's own runtime cost tracking (cel.CostLimit) keeps a stack of the
// values evaluated that grows with every iteration of a comprehension and
// is searched from its top for each step: its time is quadratic in the
// iterations (40 s for 200,000 items before reaching a limit of a
// million). The meter charges instead each step its cost when it is done,
// with a decorator on every node of the program: 1 for the step, plus one
// tenth of the size of the value it produced (a string's bytes, a list's
// or map's entries). The functions of CEL's standard library work in time
// linear in the sizes of their arguments, and those were charged when they
// were produced; the exceptions are evaluated here and charged what they
// do: ==, != and in, which compare lists and maps deeply (a reference to
// the whole payload is charged its top-level entries only), and matches,
// whose work is the product of the string and the pattern's program. A
// transform's JSON is charged as it is written, one unit per value and per
// 10 bytes. The extension libraries (strings, lists) are left out: some
// build results far larger than their arguments (replace) before a meter
// could see them.

// meter is the cost account of one evaluation, and the root of its
// activations, where the nodes find it.
type meter struct {
	in   *Input
	cost uint64
}

func (m *meter) ResolveName(name string) (any, bool) { return m.in.activation().ResolveName(name) }

func (m *meter) Parent() interpreter.Activation { return nil }

// errCostLimit is the error of an evaluation that reached the limit.
var errCostLimit = interpreter.EvalCancelledError{
	Cause:   interpreter.CostLimitExceeded,
	Message: fmt.Sprintf("cost limit exceeded: the evaluation spent more than %d units", RuntimeCostLimit),
}

// add charges n units, and ends the evaluation past the limit: cel-go's
// Eval recovers the panic as errCostLimit.
func (m *meter) add(n uint64) {
	m.cost += n
	if m.cost > RuntimeCostLimit {
		panic(errCostLimit)
	}
}

// charge charges the step that produced v.
func (m *meter) charge(v ref.Val) {
	m.add(1 + valueSize(v)/10)
}

// valueSize is a string's or bytes' length, a list's or map's entries;
// 0 for the lists and maps comprehensions build, which grow in place.
func valueSize(v ref.Val) uint64 {
	switch v := v.(type) {
	case traits.MutableLister, traits.MutableMapper:
		return 0
	case types.String:
		return uint64(len(v))
	case types.Bytes:
		return uint64(len(v))
	case traits.Lister, traits.Mapper:
		if n, ok := v.(traits.Sizer).Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

// meterOf finds the evaluation's meter up the activations.
func meterOf(a interpreter.Activation) *meter {
	for a != nil {
		switch v := a.(type) {
		case *meter:
			return v
		case *interpreter.ExecutionFrame:
			a = v.Unwrap()
		default:
			a = a.Parent()
		}
	}
	// Unreachable: every evaluation starts from a meter.
	panic("expr: evaluation without a meter")
}

// accumulator is the hidden name of a comprehension's accumulator: reading
// it is free, since map and filter append to it in place.
const accumulator = "@result"

// metering is the decorator that charges every step of a program.
func metering(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	switch n := i.(type) {
	case interpreter.InterpretableConst, *meteredAttr, *metered, *matchNode, *compareNode:
		return i, nil
	case interpreter.InterpretableAttribute:
		if a, ok := n.Attr().(interpreter.NamespacedAttribute); ok {
			if names := a.CandidateVariableNames(); len(names) == 1 && names[0] == accumulator && len(a.Qualifiers()) == 0 {
				return i, nil
			}
		}
		return &meteredAttr{InterpretableAttribute: n}, nil
	case interpreter.InterpretableCall:
		switch args := n.Args(); {
		case len(args) == 2 && (n.Function() == "_==_" || n.Function() == "_!=_" || n.Function() == "@in"):
			return &compareNode{id: n.ID(), fn: n.Function(), lhs: args[0], rhs: args[1]}, nil
		}
		if n.Function() == "matches" && len(n.Args()) == 2 {
			if p, ok := n.Args()[1].(interpreter.InterpretableConst); ok {
				if s, ok := p.Value().(types.String); ok {
					re, insts, err := compileRegex(string(s))
					if err != nil {
						return nil, err
					}
					return &matchNode{id: n.ID(), str: n.Args()[0], re: re, insts: insts}, nil
				}
			}
			// CompileFilter and CompileTransform refuse patterns that
			// are not literals.
			return nil, fmt.Errorf("matches: the pattern is not a literal")
		}
	}
	return &metered{InterpretableV2: i}, nil
}

// metered charges a step.
type metered struct {
	interpreter.InterpretableV2
}

func (n *metered) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	v := n.InterpretableV2.Exec(frame)
	meterOf(frame).charge(v)
	return v
}

func (n *metered) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// meteredAttr charges an attribute: a variable and its selections and
// indexes, one unit each, and the value's size.
type meteredAttr struct {
	interpreter.InterpretableAttribute
	quals uint64
}

func (n *meteredAttr) AddQualifier(q interpreter.Qualifier) (interpreter.Attribute, error) {
	if m, ok := q.(*meteredAttr); ok {
		// An attribute qualifying another is resolved, never executed.
		q = m.InterpretableAttribute
	}
	n.quals++
	_, err := n.InterpretableAttribute.AddQualifier(q)
	return n, err
}

func (n *meteredAttr) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	v := n.InterpretableAttribute.Exec(frame)
	meterOf(frame).add(n.quals + 1 + valueSize(v)/10)
	return v
}

func (n *meteredAttr) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// compareNode is ==, != and in, charged as they compare: deep equality of
// lists and maps costs a unit per entry, and strings a unit per 10 bytes
// compared, however few units the operands cost to produce (a reference to
// the whole payload costs its top-level entries only).
type compareNode struct {
	id       int64
	fn       string
	lhs, rhs interpreter.InterpretableV2
}

func (n *compareNode) ID() int64 { return n.id }

func (n *compareNode) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	l := n.lhs.Exec(frame)
	if types.IsUnknownOrError(l) {
		return l
	}
	r := n.rhs.Exec(frame)
	if types.IsUnknownOrError(r) {
		return r
	}
	m := meterOf(frame)
	m.add(1)
	switch n.fn {
	case "_==_":
		return types.Bool(m.equal(l, r))
	case "_!=_":
		return types.Bool(!m.equal(l, r))
	}
	// in
	switch c := r.(type) {
	case traits.Lister:
		for it := c.Iterator(); it.HasNext() == types.True; {
			if m.equal(l, it.Next()) {
				return types.True
			}
		}
		return types.False
	case traits.Container:
		return c.Contains(l)
	}
	return types.ValOrErr(r, "no such overload")
}

func (n *compareNode) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// equal is CEL's equality (types.Equal: heterogeneous, numbers across
// types), walking lists and maps itself to charge what it compares.
func (m *meter) equal(a, b ref.Val) bool {
	m.add(1)
	switch av := a.(type) {
	case types.String:
		if bv, ok := b.(types.String); ok {
			m.add(uint64(min(len(av), len(bv))) / 10)
		}
	case types.Bytes:
		if bv, ok := b.(types.Bytes); ok {
			m.add(uint64(min(len(av), len(bv))) / 10)
		}
	case traits.Lister:
		bv, ok := b.(traits.Lister)
		if !ok {
			break
		}
		if av.Size().Equal(bv.Size()) != types.True {
			return false
		}
		ai, bi := av.Iterator(), bv.Iterator()
		for ai.HasNext() == types.True && bi.HasNext() == types.True {
			if !m.equal(ai.Next(), bi.Next()) {
				return false
			}
		}
		return true
	case traits.Mapper:
		bv, ok := b.(traits.Mapper)
		if !ok {
			break
		}
		if av.Size().Equal(bv.Size()) != types.True {
			return false
		}
		for it := av.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			w, found := bv.Find(k)
			if !found || !m.equal(av.Get(k), w) {
				return false
			}
		}
		return true
	}
	return types.Equal(a, b) == types.True
}

// matchNode is matches with a literal pattern, compiled once, charged the
// product of the string's size and the pattern's program.
type matchNode struct {
	id    int64
	str   interpreter.InterpretableV2
	re    *regexp.Regexp
	insts uint64
}

func (n *matchNode) ID() int64 { return n.id }

func (n *matchNode) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	v := n.str.Exec(frame)
	s, ok := v.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(v)
	}
	meterOf(frame).add((1 + uint64(len(s))/10) * (1 + n.insts/10))
	return types.Bool(n.re.MatchString(string(s)))
}

func (n *matchNode) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// compileRegex compiles a pattern as CEL's matches does (RE2 syntax) and
// returns the size of its program, refusing one of more than
// MaxRegexInstructions.
func compileRegex(pattern string) (*regexp.Regexp, uint64, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, 0, err
	}
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, 0, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, 0, err
	}
	if n := len(prog.Inst); n > MaxRegexInstructions {
		return nil, 0, fmt.Errorf("the pattern compiles to %d instructions, more than %d", n, MaxRegexInstructions)
	}
	return re, uint64(len(prog.Inst)), nil
}
