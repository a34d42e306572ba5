// Package expr owns the CEL expressions of subscriptions: the environment
// they are written against (the event's id, source, event_id, type,
// received_at, headers, data, form and replay), their compilation with its
// bounds (source length, nesting, node count, estimated cost), and their
// evaluation over one event with a runtime cost limit: a Filter decides
// whether a subscription receives the event, a Transform computes the JSON
// body delivered instead of the envelope.
//
// It refuses to know which subscription holds which expression, and
// anything of delivery: the subscriptions package stores and validates the
// fields with CompileFilter and CompileTransform, the dispatcher evaluates
// them, counts and logs their errors, and bounds a transform's result by
// the record limit.
//
// An Input is built once per event and shared by every evaluation of it,
// concurrent ones included: its JSON body is parsed at most once, on the
// first evaluation that reads data.
//
// Bounds: an expression is refused when it is longer than MaxSourceBytes,
// nested deeper than MaxNesting, larger than MaxNodes once its macros are
// expanded, when a matches pattern is not a literal or compiles to more
// than MaxRegexInstructions, or when cel-go's checker estimates its cost
// above MaxEstimatedCost, assuming every string, list and map of the event
// holds SizeHint characters or entries (NestedSizeHint for those within an
// element of another). That estimate refuses the expressions whose cost
// grows with the square of the payload (comprehensions over the payload's
// lists nested in one another) and lets one pass over a list through.
// RuntimeCostLimit bounds every evaluation whatever the payload, with a
// meter of this package's own (meter.go): past it the evaluation ends with
// an error. It bounds the time of an evaluation and what a transform
// builds: the strings, lists and maps it produces, and its JSON, charged
// as it is written.
package expr

import (
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
)

// Bounds of an expression. All are checked when an expression is compiled
// but RuntimeCostLimit and MaxOutputBytes, checked when it is evaluated.
const (
	// MaxSourceBytes is the longest expression, in bytes.
	MaxSourceBytes = 4 << 10
	// MaxNesting is the deepest nesting of an expression (parentheses,
	// calls, selections, operators) the parser accepts.
	MaxNesting = 32
	// MaxNodes is the most nodes of an expression, macros expanded.
	MaxNodes = 2_000
	// SizeHint is the size the cost estimate assumes for every string,
	// list and map of the event (characters or entries).
	SizeHint = 1_024
	// NestedSizeHint is the size the cost estimate assumes for a string,
	// list or map of the event reached through an element of a list or map.
	NestedSizeHint = 16
	// MaxEstimatedCost is the largest cost cel-go's checker may estimate
	// for an expression, with SizeHint.
	MaxEstimatedCost = 1_000_000
	// RuntimeCostLimit is the most cost units one evaluation spends, a
	// transform's JSON included; past it, it ends with an error. A step of
	// the evaluation costs a unit plus one per 10 bytes of the string, or
	// 10 entries of the list or map, it produced; JSON costs a unit per
	// value and per 10 bytes written, so it is at most about 20 MB.
	RuntimeCostLimit = 1_000_000
	// MaxRegexInstructions is the largest program a matches pattern may
	// compile to.
	MaxRegexInstructions = 1_000
)

// Error is an expression refused at compilation: where, and why.
type Error struct {
	// Line and Column locate the problem in the expression, from 1;
	// columns count characters. A problem of the whole expression (its
	// length, its cost) is at line 1, column 1.
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// env is the one CEL environment of every expression: the variables and
// the parser's limits. A cel.Env is immutable and safe for concurrent use.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("id", cel.StringType),
		cel.Variable("source", cel.StringType),
		cel.Variable("event_id", cel.StringType),
		cel.Variable("type", cel.StringType),
		cel.Variable("received_at", cel.TimestampType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("data", cel.DynType),
		cel.Variable("form", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("replay", cel.IntType),
		// JSON numbers are ints when integral, doubles otherwise: let
		// data.amount > 1000 compare either with either.
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserExpressionSizeLimit(MaxSourceBytes),
		cel.ParserRecursionLimit(MaxNesting),
		cel.ExpressionNodeLimit(MaxNodes),
		// Comprehensions name their accumulator @result, which no
		// expression can name: the meter reads it for free.
		cel.EnableHiddenAccumulatorName(true),
	)
})

// compile parses, type-checks and estimates src, and plans its program.
func compile(src string) (*cel.Ast, cel.Program, error) {
	if len(src) > MaxSourceBytes {
		return nil, nil, &Error{Line: 1, Column: 1, Msg: fmt.Sprintf("the expression is %d bytes long, more than %d", len(src), MaxSourceBytes)}
	}
	e, err := env()
	if err != nil {
		return nil, nil, fmt.Errorf("expr: environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, nil, issueError(iss)
	}
	cost, err := e.EstimateCost(ast, sizes{})
	if err != nil {
		return nil, nil, &Error{Line: 1, Column: 1, Msg: "cost: " + err.Error()}
	}
	if cost.Max > MaxEstimatedCost {
		return nil, nil, locatedError(nestedComprehension(ast.NativeRep()), fmt.Sprintf(
			"the estimated cost, %d, is more than %d (lists, maps and strings of the event taken of %d entries or characters): comprehensions over the event's lists nested in one another cost too much",
			cost.Max, MaxEstimatedCost, SizeHint))
	}
	if err := checkPatterns(ast); err != nil {
		return nil, nil, err
	}
	prg, err := e.Program(ast, cel.CustomDecoratorV2(metering))
	if err != nil {
		return nil, nil, &Error{Line: 1, Column: 1, Msg: err.Error()}
	}
	return ast, prg, nil
}

// checkPatterns refuses a matches whose pattern is not a literal, or does
// not compile within MaxRegexInstructions.
func checkPatterns(a *cel.Ast) error {
	native := a.NativeRep()
	calls := celast.MatchDescendants(celast.NavigateAST(native), celast.FunctionMatcher("matches"))
	for _, call := range calls {
		c := call.AsCall()
		args := c.Args()
		if len(args) == 0 {
			continue
		}
		pattern := args[len(args)-1]
		at := startOf(native, pattern)
		if pattern.Kind() != celast.LiteralKind {
			return locatedError(at, "matches needs a literal pattern")
		}
		s, ok := pattern.AsLiteral().(types.String)
		if !ok {
			return locatedError(at, "matches needs a string pattern")
		}
		if _, _, err := compileRegex(string(s)); err != nil {
			return locatedError(at, "matches: "+err.Error())
		}
	}
	return nil
}

// nestedComprehension is where the first comprehension holding another
// one, or a membership test, starts: the likely reason of a cost refused;
// else the expression's start.
func nestedComprehension(a *celast.AST) common.Location {
	for _, c := range celast.MatchDescendants(celast.NavigateAST(a), celast.KindMatcher(celast.ComprehensionKind)) {
		inner := celast.MatchDescendants(celast.NavigateExpr(a, c.AsComprehension().LoopStep()), func(e celast.NavigableExpr) bool {
			return e.Kind() == celast.ComprehensionKind || e.Kind() == celast.CallKind && e.AsCall().FunctionName() == "@in"
		})
		if len(inner) > 0 {
			return startOf(a, c)
		}
	}
	return common.NoLocation
}

// startOf is the location of e's first character: the leftmost of its
// nodes' (a selection's location is its dot).
func startOf(a *celast.AST, e celast.Expr) common.Location {
	start := a.SourceInfo().GetStartLocation(e.ID())
	for _, d := range celast.MatchDescendants(celast.NavigateExpr(a, e), celast.AllMatcher()) {
		at := a.SourceInfo().GetStartLocation(d.ID())
		if at.Line() >= 1 && (at.Line() < start.Line() || at.Line() == start.Line() && at.Column() < start.Column()) {
			start = at
		}
	}
	return start
}

// locatedError is an *Error at a location cel-go reports: lines from 1,
// columns from 0.
func locatedError(at common.Location, msg string) *Error {
	line, col := at.Line(), at.Column()+1
	if line < 1 {
		line, col = 1, 1
	}
	if col < 1 {
		col = 1
	}
	return &Error{Line: line, Column: col, Msg: msg}
}

// issueError is the first of the issues as an *Error, with a hint for
// the mistakes a newcomer to CEL makes most.
func issueError(iss *cel.Issues) error {
	errs := iss.Errors()
	if len(errs) == 0 {
		return &Error{Line: 1, Column: 1, Msg: iss.Err().Error()}
	}
	return locatedError(errs[0].Location, withHint(errs[0].Message))
}

// withHint is msg, a compiler's, followed by a hint when it reports a
// single = or an int and a double mixed.
func withHint(msg string) string {
	switch {
	case strings.Contains(msg, "token recognition error at: '="):
		return msg + "; a single = does not compare: write =="
	case strings.Contains(msg, "no matching overload") &&
		(strings.Contains(msg, "(int, double)") || strings.Contains(msg, "(double, int)")):
		return msg + "; an int and a double do not mix: write 1 for an int and 1.0 for a double, or convert with int(...) or double(...)"
	}
	return msg
}

// article is t, a type's name, after "a" or "an".
func article(t *cel.Type) string {
	name := t.String()
	if strings.IndexAny(name, "aeioAEIO") == 0 {
		return "an " + name
	}
	return "a " + name
}

// sizes is the size estimator of the cost estimate. A string, list or map
// of the event, or computed by a function, is assumed to hold SizeHint
// characters or entries; one reached through an element of another (a
// commit's message, a commit's files) NestedSizeHint: the elements of a
// list share the payload, so going through each element's own list costs
// about as much as one pass over the payload, while crossing two lists of
// the payload costs the product of their sizes.
type sizes struct{}

func (sizes) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	for _, p := range n.Path() {
		switch p {
		case "@items", "@values", "@keys", "@indices":
			return &checker.SizeEstimate{Min: 0, Max: NestedSizeHint}
		}
	}
	return &checker.SizeEstimate{Min: 0, Max: SizeHint}
}

func (sizes) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}
