package verify

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/parser"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/lru"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// ResponseVar is the name of the CEL variable that holds the answer.
const ResponseVar = "response"

// CostLimit is the most an evaluation of a success condition may cost: the
// API server's limit for one call of a validation rule.
const CostLimit = celconfig.PerCallLimit

const (
	// cacheSize bounds the compiled programs kept in memory. Models mostly
	// share a few expressions; a bound keeps memory flat whatever tenants
	// write (an entry is at most a MaxVerificationCondition-long expression
	// and its program).
	cacheSize = 256
	// maxCompileDetail bounds the compile error a user sees (one spec field
	// can hold many mistakes).
	maxCompileDetail = 512
	// maxCompileIssues is how many CEL issues a compile error names.
	maxCompileIssues = 3
)

// Program is a compiled success condition. It is safe for concurrent use.
type Program struct {
	expr    string
	program cel.Program
	// conjuncts are the top-level operands of &&, in source order, so a
	// false answer can name the first one that is false.
	conjuncts []conjunct
}

// conjunct is one top-level operand of the condition's && chain: its text
// and, when the chain has more than one, its own checked AST.
type conjunct struct {
	text string
	ast  *cel.Ast
}

// Expression returns the source of the success condition.
func (p *Program) Expression() string { return p.expr }

// cached is one entry of the program cache; a compile error is cached too, so
// a wrong expression written by one tenant is not recompiled on every pass.
type cached struct {
	program *Program
	err     error
}

var cache = lru.New(cacheSize)

// Compile compiles a success condition, or returns an error naming CEL's
// complaint (with its line and column, never the whole source) so the author
// can fix it. The expression must have type bool. Compiled programs are kept
// in a small bounded cache keyed by the expression.
func Compile(expr string) (*Program, error) {
	if n := utf8.RuneCountInString(expr); n == 0 || n > v1alpha1.MaxVerificationCondition {
		// Never cached: the check is cheap, and a long key would cost memory.
		return nil, fmt.Errorf("must be 1 to %d characters long", v1alpha1.MaxVerificationCondition)
	}
	if v, ok := cache.Get(expr); ok {
		c := v.(cached)
		return c.program, c.err
	}
	p, err := compile(expr)
	cache.Add(expr, cached{program: p, err: err})
	return p, err
}

// Check reports whether expr compiles as a success condition; the error is
// Compile's.
func Check(expr string) error {
	_, err := Compile(expr)
	return err
}

// env is the CEL environment of success conditions: the Kubernetes base
// environment (the NewExpressions flavour, as the API server uses to accept a
// new rule), the response variable and its type, and the runtime cost
// accounting of Kubernetes' libraries. Building it is expensive, so it is
// built once.
var env = sync.OnceValues(func() (*cel.Env, error) {
	rt := responseType()
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(
		environment.VersionedOptions{
			IntroducedVersion: version.MajorMinor(1, 0),
			EnvOptions: []cel.EnvOption{
				cel.Variable(ResponseVar, rt.CelType()),
				// Keeps macro calls (exists, all, ...) in the source info,
				// so a conjunct is printed as written, not as its
				// expansion.
				cel.EnableMacroCallTracking(),
			},
			DeclTypes: []*apiservercel.DeclType{rt},
		},
		environment.StrictCostOpt,
	)
	if err != nil {
		return nil, err
	}
	return set.Env(environment.NewExpressions)
})

// responseType declares response as an object, so a misspelt field
// (response.cod) fails at compile time rather than on every answer.
func responseType() *apiservercel.DeclType {
	field := func(name string, t *apiservercel.DeclType) *apiservercel.DeclField {
		return apiservercel.NewDeclField(name, t, true, nil, nil)
	}
	return apiservercel.NewObjectType("openmed.verify.Response", map[string]*apiservercel.DeclField{
		"code":    field("code", apiservercel.IntType),
		"headers": field("headers", apiservercel.NewMapType(apiservercel.StringType, apiservercel.StringType, -1)),
		"body":    field("body", apiservercel.StringType),
		"json":    field("json", apiservercel.DynType),
	})
}

func compile(expr string) (*Program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment cannot be built: %w", err)
	}
	checked, issues := e.Compile(expr)
	if issues != nil && issues.Err() != nil {
		return nil, compileError(issues.Errors())
	}
	if !checked.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("must evaluate to a bool, not %s", checked.OutputType())
	}
	// As the API server prepares a validation rule. (cel.OptTrackState
	// would give each conjunct's value from this one evaluation, but in
	// cel-go v0.29 combining it with cost tracking drops the cost limit;
	// the conjuncts are evaluated again instead, see firstFalse.)
	prog, err := e.Program(checked,
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(celconfig.CheckFrequency),
	)
	if err != nil {
		return nil, fmt.Errorf("cannot be prepared: %w", err)
	}
	return &Program{expr: expr, program: prog, conjuncts: conjuncts(e, checked, expr)}, nil
}

// compileError names the first CEL issues by line and column. CEL's own
// rendering quotes the source line with a caret; that is left out, so the
// message stays short.
func compileError(errs []*cel.Error) error {
	parts := make([]string, 0, maxCompileIssues+1)
	for i, e := range errs {
		if i == maxCompileIssues {
			parts = append(parts, fmt.Sprintf("and %d more", len(errs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
	}
	return errors.New(truncate("does not compile: "+strings.Join(parts, "; "), maxCompileDetail))
}

// conjuncts flattens the top-level && of a checked expression. The parser
// balances a chain of && into a tree, so the flattening walks it in order;
// a parenthesised && inside the chain is flattened too, which names a
// smaller, still exact, part. Each conjunct is printed back from the AST
// (CEL's unparser: the source with its spacing normalised) and, when there
// are several, compiled on its own so a false answer can evaluate it alone.
func conjuncts(e *cel.Env, a *cel.Ast, expr string) []conjunct {
	whole := []conjunct{{text: expr}}
	info := a.NativeRep().SourceInfo()
	var parts []ast.Expr
	var walk func(x ast.Expr)
	walk = func(x ast.Expr) {
		if x.Kind() == ast.CallKind && x.AsCall().FunctionName() == operators.LogicalAnd {
			for _, arg := range x.AsCall().Args() {
				walk(arg)
			}
			return
		}
		parts = append(parts, x)
	}
	walk(a.NativeRep().Expr())
	out := make([]conjunct, 0, len(parts))
	for _, x := range parts {
		// No wrapping: a message is one line.
		text, err := parser.Unparse(x, info, parser.WrapOnColumn(math.MaxInt))
		if err != nil {
			// Unparsing a checked AST does not fail; should it ever, the
			// message names the whole condition as written.
			return whole
		}
		out = append(out, conjunct{text: text})
	}
	if len(out) == 1 {
		return out
	}
	for i := range out {
		// The printed text of a part of a checked expression compiles
		// in the same environment; if it ever does not, that conjunct
		// is skipped when looking for the false one.
		if sub, issues := e.Compile(out[i].text); issues == nil || issues.Err() == nil {
			out[i].ast = sub
		}
	}
	return out
}
