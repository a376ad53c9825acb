// Package verify sends an OpenMedModel's golden request (spec.verification)
// to one pod and judges the answer with the model's CEL success condition.
//
// The condition is compiled in the CEL environment Kubernetes gives
// x-kubernetes-validations rules (the base environment of
// k8s.io/apiserver/pkg/cel/environment), so the same functions exist, plus one
// variable, response:
//
//	response.code     int                  the HTTP status code
//	response.headers  map(string, string)  lower-case header name → first value
//	response.body     string               the answer's body
//	response.json     dyn                  the body parsed as JSON, null when it is not JSON
//
// An evaluation is bounded by the cost limit the API server puts on one
// validation rule (k8s.io/apiserver/pkg/apis/cel.PerCallLimit). Unlike the API
// server, Compile does not refuse a condition on its estimated cost: the size
// of response.json is unknown, so nearly every comprehension over it would be
// refused; the runtime limit is the bound.
//
// Send makes one attempt and returns a Result whose Reason is one of the
// Reason constants and whose Message is a short summary meant for status
// conditions and events: it never carries a request header value (headers may
// hold secrets) or the request body, and it is at most MaxMessageBytes long.
// What a message quotes from outside (the answer's first bytes, a transport
// or evaluation error, a conjunct's text) has every verbatim copy of a header
// value and of the body replaced, for a server may echo its request.
//
// The package holds no Kubernetes client: the caller resolves the pod's IP and
// the headers' values and decides what a Result means for a rollout.
package verify
