package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/verify"
)

// The golden request (spec.verification) adds no phase of its own: it adds
// reasons to states the capture holds. A pod ready but for the readiness
// gate makes a rollout say Verifying; a pod that failed every attempt fails
// the rollout at once, rolled back or failed like one that missed its
// deadline, with Degraded=True/VerificationFailed naming the pod and what
// its answer lacked. Each fixture is the capture of that state with the
// change the decision core makes for the verdict (pkg/rollout/verification.go,
// whose TestVerificationDecides drives the same states on a real API
// server); the verdict itself is what pkg/verify says of a model that
// forgets names.

// goldenRequest is the fixtures' spec.verification, defaulted as the API
// server stores it: the synthetic note's patient must be found.
func goldenRequest() *v1alpha1.Verification {
	v := &v1alpha1.Verification{
		Request: v1alpha1.VerificationRequest{
			Port: intstr.FromString("http"),
			Path: "/pii/extract",
			Body: `{"text":"Patient John Smith, seen 2024-03-05.","model_name":"pii","confidence_threshold":0.5}`,
		},
		SuccessCondition: `response.code == 200 && response.json.entities.exists(e, e.label == "NAME" && e.text == "John Smith")`,
	}
	v.Default()
	return v
}

// forgetfulAnswer is a model's answer to the golden request that finds the
// date and forgets the name.
const forgetfulAnswer = `{"entities":[{"label":"DATE","text":"2024-03-05","start":25,"end":35,"score":0.97}]}`

// podSuffix makes the name of the pod a fixture's message names, as the
// Deployment controller names one (template hash, random suffix).
const podSuffix = "-5f7c8d9b6-q4mzt"

// verdictOf is the pod's verdict after it gave forgetfulAnswer to every
// attempt of spec: pkg/verify judges the answer; the attempts are counted
// as the verifier counts them (controllers/verify.go).
func verdictOf(spec *v1alpha1.Verification) (string, error) {
	prog, err := verify.Compile(spec.SuccessCondition)
	if err != nil {
		return "", err
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(forgetfulAnswer))
	}))
	defer srv.Close()
	res := verify.Send(context.Background(), srv.Client(), verify.Request{
		URL: srv.URL + spec.Request.Path, Method: spec.Request.Method, Body: spec.Request.Body,
		Timeout: time.Duration(*spec.Request.TimeoutSeconds) * time.Second,
	}, prog)
	if res.Passed || res.Reason != verify.ReasonConditionFalse {
		return "", fmt.Errorf("the forgetful answer was judged %s: %s", res.Reason, res.Message)
	}
	return rollout.Shorten(fmt.Sprintf("%s %s failed %d of %d attempts: %s", spec.Request.Method, spec.Request.Path,
		*spec.Attempts, *spec.Attempts, res.Message), rollout.MaxRefusalMessage), nil
}

// verificationDerivations are the fixtures of the golden request.
func verificationDerivations() []derivation {
	declare := func(u *unstructured.Unstructured) (*v1alpha1.Verification, error) {
		spec := goldenRequest()
		v, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(spec)
		if err != nil {
			return nil, err
		}
		return spec, unstructured.SetNestedMap(u.Object, v, "spec", "verification")
	}
	target := func(u *unstructured.Unstructured) string {
		name, _, _ := unstructured.NestedString(u.Object, "status", "targetName")
		return name
	}
	// failed makes the failure of the capture the pod's verdict: Degraded
	// names it, and Stalled, when the failure is final, says it after the
	// Deployment (the core's failureCauseNote).
	failed := func(u *unstructured.Unstructured) error {
		spec, err := declare(u)
		if err != nil {
			return err
		}
		verdict, err := verdictOf(spec)
		if err != nil {
			return err
		}
		cause := fmt.Sprintf("pod %s of %s failed the golden request: %s", target(u)+podSuffix, desired(u), verdict)
		d := conditionOf(u, v1alpha1.DegradedCondition)
		d["status"], d["reason"], d["message"] = "True", v1alpha1.VerificationFailedReason, rollout.MsgVerificationFailedPrefix+cause
		if p := conditionOf(u, v1alpha1.ProgressingCondition); p != nil && p["reason"] == v1alpha1.ProgressDeadlineExceededReason {
			// No deadline passed: Progressing names the request
			// (verificationStopped).
			p["reason"], p["message"] = v1alpha1.VerificationFailedReason, rollout.MsgVerificationStopped
		}
		if s := conditionOf(u, v1alpha1.StalledCondition); s != nil {
			m, _ := s["message"].(string)
			at := "failed on Deployment " + target(u)
			if !strings.Contains(m, at) {
				return fmt.Errorf("Stalled says %q, without %q", m, at)
			}
			s["message"] = strings.Replace(m, at, at+": "+cause, 1)
		}
		return nil
	}
	const failedChange = "spec.verification declared (managedFields as captured) and a pod of the version failed every attempt of the golden request instead of missing the deadline: Degraded=True/VerificationFailed names the pod and what its answer lacked"
	return []derivation{
		{"verifying.yaml", "rolling_out.yaml", "spec.verification declared (managedFields as captured) and the new pod ready but for the readiness gate, waiting for the golden request: Ready, Progressing and Reconciling read Verifying, Reconciling naming the pod", func(u *unstructured.Unstructured) error {
			if _, err := declare(u); err != nil {
				return err
			}
			for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.ProgressingCondition} {
				c := conditionOf(u, typ)
				c["reason"], c["message"] = v1alpha1.VerifyingReason, rollout.MsgVerifying
			}
			c := conditionOf(u, v1alpha1.ReconcilingCondition)
			m, _ := c["message"].(string)
			i := strings.LastIndex(m, "; serving ")
			if i < 0 {
				return fmt.Errorf("Reconciling says %q, without what serves", m)
			}
			c["reason"], c["message"] = v1alpha1.VerifyingReason, m[:i]+"; verifying pod "+target(u)+podSuffix+m[i:]
			return nil
		}},
		{"verification_rollback_in_progress.yaml", "rollback_in_progress.yaml", failedChange, failed},
		{"verification_rolled_back.yaml", "rolled_back.yaml", failedChange, failed},
		{"verification_failed.yaml", "failed_rollout.yaml", failedChange, failed},
	}
}
