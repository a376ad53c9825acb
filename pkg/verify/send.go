package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// Reasons of a Result. They are CamelCase, as Kubernetes condition and event
// reasons are, and each is defined only here.
const (
	// ReasonPassed: the answer satisfied the success condition.
	ReasonPassed = "Passed"
	// ReasonConditionFalse: the pod answered, and the condition is false.
	ReasonConditionFalse = "ConditionFalse"
	// ReasonEvaluation: the condition could not be evaluated on the answer
	// (a missing JSON field, a wrong type, or the cost limit).
	ReasonEvaluation = "EvaluationFailed"
	// ReasonTimeout: no complete answer within the request's timeout.
	ReasonTimeout = "Timeout"
	// ReasonConnection: the request could not be sent or the answer could
	// not be read (refused connection, reset, malformed HTTP).
	ReasonConnection = "ConnectionFailed"
	// ReasonTooLarge: the answer's body is larger than MaxAnswerBytes.
	ReasonTooLarge = "AnswerTooLarge"
	// ReasonInvalidRequest: the request could not be built (a bad URL or
	// method, or no program); the pod was not asked.
	ReasonInvalidRequest = "InvalidRequest"
	// ReasonCanceled: the caller's context ended before an answer; the pod
	// is not to blame, and the attempt should not count.
	ReasonCanceled = "Canceled"
)

const (
	// MaxAnswerBytes is the most of an answer's body that is read; a longer
	// body fails the attempt (ReasonTooLarge).
	MaxAnswerBytes = 1 << 20
	// MaxMessageBytes bounds Result.Message.
	MaxMessageBytes = 300
	// DefaultTimeout bounds an attempt whose Request.Timeout is not set: the
	// API's default (spec.verification.request.timeoutSeconds).
	DefaultTimeout = time.Duration(v1alpha1.DefaultVerificationTimeout) * time.Second

	// snippetBytes is how much of the answer's body a message quotes.
	snippetBytes = 100
	// maxPartBytes bounds each quoted part of a message (a conjunct, an
	// error, an escaped snippet), so the summary keeps its shape.
	maxPartBytes = 120
)

// Request is one golden request, ready to send: the caller has resolved the
// pod's address and the headers' values.
type Request struct {
	// URL is the full address, for example http://10.0.0.7:8080/pii/extract.
	URL string
	// Method is the HTTP method; empty means POST, the API's default.
	Method string
	// Header is sent as is. Its values may be secrets: no Message ever
	// contains them. A Host header sets the request's host.
	Header http.Header
	// Body is sent as is, with Content-Type application/json unless Header
	// sets a Content-Type. No Message ever contains it.
	Body string
	// Timeout bounds the attempt, from connecting to the last byte of the
	// answer; zero means DefaultTimeout. Evaluating the condition is
	// bounded by its cost, not by Timeout.
	Timeout time.Duration
}

// Result is the verdict of one attempt.
type Result struct {
	// Passed reports whether the answer satisfied the success condition.
	Passed bool
	// Code is the answer's HTTP status code, 0 without an answer.
	Code int
	// Latency is the time from sending the request to the answer's last
	// byte, 0 without an answer.
	Latency time.Duration
	// Reason is one of the Reason constants.
	Reason string
	// Message is a human summary of at most MaxMessageBytes, for status and
	// events: the status code, what the answer lacked (the first false
	// conjunct of the condition) and the first bytes of its body. It never
	// contains a request header value or the request body.
	Message string
}

// Send makes one attempt: it sends req with c (http.DefaultClient when nil)
// without following redirects (a redirect is an answer the condition
// judges), reads at most MaxAnswerBytes of the answer, parses the body as
// JSON when it is JSON, and evaluates prog on it.
func Send(ctx context.Context, c *http.Client, req Request, prog *Program) Result {
	r := newRedactor(req)
	if prog == nil {
		return Result{Reason: ReasonInvalidRequest, Message: "no success condition to evaluate"}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	attempt, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	hreq, err := newHTTPRequest(attempt, req)
	if err != nil {
		return Result{Reason: ReasonInvalidRequest, Message: finish("the request cannot be built: " + r.part(unwrapURLError(err).Error()))}
	}
	start := time.Now()
	resp, err := noRedirects(c).Do(hreq)
	if err != nil {
		return failed(ctx, err, timeout, r)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	latency := time.Since(start)
	if err != nil {
		res := failed(ctx, err, timeout, r)
		res.Code = resp.StatusCode
		return res
	}
	if len(body) > MaxAnswerBytes {
		return Result{Code: resp.StatusCode, Latency: latency, Reason: ReasonTooLarge,
			Message: finish(fmt.Sprintf("answered %d with a body over the %d-byte (1 MiB) limit", resp.StatusCode, MaxAnswerBytes))}
	}
	res := prog.evaluate(ctx, resp, body, r)
	res.Code, res.Latency = resp.StatusCode, latency
	if res.Passed {
		res.Message = finish(fmt.Sprintf("answered %d in %s", resp.StatusCode, roundLatency(latency)))
	}
	return res
}

// newHTTPRequest builds the HTTP request of req.
func newHTTPRequest(ctx context.Context, req Request) (*http.Request, error) {
	method := req.Method
	if method == "" {
		method = v1alpha1.DefaultVerificationMethod
	}
	var body io.Reader
	if req.Body != "" {
		body = strings.NewReader(req.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, req.URL, body)
	if err != nil {
		return nil, err
	}
	hasType := false
	for name, values := range req.Header {
		if strings.EqualFold(name, "Host") {
			// net/http ignores a Host header; the request's Host field is
			// how one is sent (as a kubelet probe does).
			if len(values) > 0 {
				hreq.Host = values[0]
			}
			continue
		}
		hasType = hasType || strings.EqualFold(name, "Content-Type")
		for _, v := range values {
			hreq.Header.Add(name, v)
		}
	}
	if req.Body != "" && !hasType {
		hreq.Header.Set("Content-Type", "application/json")
	}
	return hreq, nil
}

// noRedirects returns a copy of c that hands a redirect back as the answer:
// following one would send the headers (perhaps secrets) to another address.
func noRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// failed turns a transport error into a Result: the caller's cancellation,
// the attempt's timeout, or a connection failure.
func failed(ctx context.Context, err error, timeout time.Duration, r redactor) Result {
	var nerr net.Error
	switch {
	case ctx.Err() != nil:
		return Result{Reason: ReasonCanceled, Message: "canceled before an answer"}
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()):
		return Result{Reason: ReasonTimeout, Message: finish("no answer within " + timeout.String())}
	}
	return Result{Reason: ReasonConnection, Message: finish("no answer: " + r.part(unwrapURLError(err).Error()))}
}

// unwrapURLError drops net/http's "Post \"http://...\":" prefix: the URL is
// the caller's, and repeating it leaves less room for the cause.
func unwrapURLError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// evaluate judges an answer. It sets Passed, Reason and, unless the answer
// passed, Message.
func (p *Program) evaluate(ctx context.Context, resp *http.Response, body []byte, r redactor) Result {
	headers := make(map[string]string, len(resp.Header))
	for name, values := range resp.Header {
		if len(values) > 0 {
			headers[strings.ToLower(name)] = values[0]
		}
	}
	activation := map[string]any{ResponseVar: map[string]any{
		"code":    int64(resp.StatusCode),
		"headers": headers,
		"body":    string(body),
		"json":    parseJSON(body),
	}}
	// The attempt's timeout does not apply: the answer is in, and the cost
	// limit bounds the evaluation the way the API server bounds a rule.
	val, details, err := p.program.ContextEval(ctx, activation)
	answered := fmt.Sprintf("answered %d but ", resp.StatusCode)
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return Result{Reason: ReasonEvaluation, Message: finish(answered + fmt.Sprintf(
			"evaluating the condition went over the cost limit of a Kubernetes validation rule (%d)", CostLimit))}
	case err != nil && ctx.Err() != nil:
		return Result{Reason: ReasonCanceled, Message: "canceled while evaluating the answer"}
	case err != nil:
		return Result{Reason: ReasonEvaluation, Message: finish(answered + "the condition cannot be evaluated: " +
			r.part(err.Error()) + "; " + r.snippet(body))}
	case val == types.True:
		return Result{Passed: true, Reason: ReasonPassed}
	}
	spent := uint64(0)
	if c := details.ActualCost(); c != nil {
		spent = *c
	}
	return Result{Reason: ReasonConditionFalse, Message: finish(answered + r.part(p.firstFalse(ctx, activation, CostLimit-min(spent, CostLimit))) + " is false; " + r.snippet(body))}
}

// firstFalse names the first conjunct that is false on the answer. Each is
// evaluated alone, in order: CEL's && is commutative (an error on one side
// is absorbed by false on the other), so the false one cannot be told from
// the whole result. The evaluations share what the whole condition left of
// CostLimit, so the answer costs no more than one validation rule may.
func (p *Program) firstFalse(ctx context.Context, activation map[string]any, budget uint64) string {
	if len(p.conjuncts) == 1 {
		return p.conjuncts[0].text
	}
	e, err := env()
	if err != nil {
		return "the condition"
	}
	for _, c := range p.conjuncts {
		if budget == 0 {
			break
		}
		if c.ast == nil {
			continue
		}
		prog, err := e.Program(c.ast, cel.CostLimit(budget), cel.InterruptCheckFrequency(celconfig.CheckFrequency))
		if err != nil {
			continue
		}
		val, details, err := prog.ContextEval(ctx, activation)
		if details != nil && details.ActualCost() != nil {
			budget -= min(*details.ActualCost(), budget)
		}
		if err == nil && val == types.False {
			return c.text
		}
	}
	return "the condition"
}

// parseJSON returns the body as a JSON value for CEL (nil when it is not one
// JSON document). Whole numbers become int, so `e.start == 8` holds; other
// numbers become double.
func parseJSON(body []byte) any {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil // trailing data: not one JSON document
	}
	return numbers(v)
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			x[k] = numbers(c)
		}
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(x), 64) // out of range gives ±Inf
		return f
	}
	return v
}

// roundLatency keeps a latency readable: milliseconds, or microseconds
// below one.
func roundLatency(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
