// Package validation checks OpenMedModel objects with exactly the rules the
// CRD makes the API server enforce (OpenAPI schema, strict field validation and
// CEL), so a library user or the operator can reject what the server would
// reject, with the same verdict. A differential test against a real API server
// keeps the two copies equal.
//
// Messages never echo user values: they name the field and the rule only.
// One exception: a spec.verification.successCondition that does not compile
// is refused with CEL's complaint (which may name an identifier or a type of
// the expression), so its author can fix it.
//
// One rule is the Go validator's only, because the CRD cannot state it
// (see GoOnlyFields): the success condition must compile. The operator's
// admission webhook (pkg/webhook) enforces it on admission.
package validation

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/verify"
)

var (
	familyRE       = regexp.MustCompile(v1alpha1.FamilyPattern)
	versionRE      = regexp.MustCompile(v1alpha1.VersionPattern)
	dnsSubdomainRE = regexp.MustCompile(v1alpha1.DNSSubdomainPattern)
	dnsLabelRE     = regexp.MustCompile(v1alpha1.DNSLabelPattern)
	percentRE      = regexp.MustCompile(v1alpha1.PercentPattern)
	// The patterns of the verification header markers
	// (VerificationHeader.Name, SecretKeySelector.Key); the differential
	// test proves they are the same.
	headerNameRE = regexp.MustCompile(`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`)
	secretKeyRE  = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
)

// GoOnlyFields are the fields with a rule the Go validator enforces and the
// CRD does not, each with the reason. The CRD alone accepts an object that
// breaks one (TestGoOnlyRefusals shows it on an API server without the
// webhook); installed with the bundle, the operator's validating admission
// webhook (pkg/webhook) refuses it on create and update with this
// validator's message, and the operator still refuses one that got in while
// the webhook was unreachable (failurePolicy Ignore) with a SpecError in
// status. The differential test holds every other verdict equal and lists
// these cases in testdata/goonly.yaml.
var GoOnlyFields = map[string]string{
	"spec.verification.successCondition": "the API server does not compile a CEL expression held in a field",
}

// Fixed, value-free messages. They are part of the API: status conditions
// quote them.
const (
	MsgFamily         = "must start with a letter, end with a letter or digit, and contain only letters, digits, '.', '_' or '-'"
	MsgVersion        = "must be a model pointer that starts with a letter or digit and contains only letters, digits and '.', '_', ':', '@', '/', '+', '~', '-'"
	MsgVersionPath    = "must not contain '..' or '://': a model pointer names an artefact, not a path or a URL."
	MsgDNSSubdomain   = "must be a valid DNS subdomain"
	MsgDNSLabel       = "must be a valid DNS label"
	MsgIntOrPercent   = "must be a non-negative integer or a percentage from 0% to 100%"
	MsgBothZero       = "RollingUpdate cannot set both maxUnavailable and maxSurge to zero."
	MsgProgressDeadln = "must be a positive integer"
	MsgBakeSeconds    = "must be from 0 to 86400"

	MsgUnschedulableAction  = "must be Wait or ReplaceInPlace"
	MsgReplaceInPlaceType   = "replacing pods in place (whenUnschedulable) needs rolloutStrategy.type RollingUpdate."
	MsgReplaceInPlaceFields = "unschedulableSeconds and minAvailable apply only when whenUnschedulable replaces pods in place."
	MsgUnschedulableSeconds = "unschedulableSeconds must be below progressDeadlineSeconds."
	MsgMinAvailable         = "minAvailable cannot exceed replicas."

	MsgVerificationPort  = "must be a port number from 1 to 65535 or a container port name (IANA_SVC_NAME)"
	MsgVerificationPath  = "must start with '/'"
	MsgHeaderName        = "must be an HTTP header name (letters, digits and !#$%&'*+.^_|~-)"
	MsgHeaderValueSource = "exactly one of value and valueFrom must be set."
	MsgSecretKey         = "must contain only letters, digits, '-', '_' or '.'"
	// MsgSuccessCondition starts the message of a condition that does not
	// compile; CEL's complaint follows.
	MsgSuccessCondition = "must be a CEL expression over response of type bool: "
)

// verificationMethods is the enum of spec.verification.request.method.
var verificationMethods = []string{"GET", "POST", "PUT"}

// MsgTier is the message for a tier outside the enum; it lists the valid tiers.
var MsgTier = func() string {
	names := make([]string, len(v1alpha1.Tiers))
	for i, t := range v1alpha1.Tiers {
		names[i] = string(t)
	}
	return "must be one of " + strings.Join(names, ", ")
}()

// ValidateOpenMedModel validates a typed object whose defaults are filled in
// (see v1alpha1.OpenMedModel.Default). It checks every value rule of the CRD;
// structural rules (unknown fields, JSON types) cannot be broken by a typed
// object and are checked by ValidateJSON.
func ValidateOpenMedModel(obj *v1alpha1.OpenMedModel) field.ErrorList {
	return ValidateSpec(&obj.Spec, field.NewPath("spec"))
}

// ValidateSpec validates a defaulted spec. fldPath is where the spec sits in
// the object, normally field.NewPath("spec").
func ValidateSpec(spec *v1alpha1.OpenMedModelSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateString(spec.Family, fldPath.Child("family"), v1alpha1.MaxFamilyLength, familyRE, MsgFamily, true)...)
	errs = append(errs, validateString(spec.Version, fldPath.Child("version"), v1alpha1.MaxVersionLength, versionRE, MsgVersion, true)...)
	if strings.Contains(spec.Version, "..") || strings.Contains(spec.Version, "://") {
		// The field's CEL rule (x-kubernetes-validations on version).
		errs = append(errs, field.Invalid(fldPath.Child("version"), field.OmitValueType{}, MsgVersionPath))
	}
	if !validTier(spec.Tier) {
		errs = append(errs, field.Invalid(fldPath.Child("tier"), field.OmitValueType{}, MsgTier))
	}
	if spec.Replicas != nil {
		errs = append(errs, validateRange(int64(*spec.Replicas), fldPath.Child("replicas"), v1alpha1.MinReplicas, v1alpha1.MaxReplicas)...)
	}
	if spec.TargetRef != nil {
		p := fldPath.Child("targetRef")
		if spec.TargetRef.Name != "" {
			errs = append(errs, validateString(spec.TargetRef.Name, p.Child("name"), v1alpha1.MaxDNSSubdomainLength, dnsSubdomainRE, MsgDNSSubdomain, false)...)
		}
		if spec.TargetRef.ContainerName != "" {
			errs = append(errs, validateString(spec.TargetRef.ContainerName, p.Child("containerName"), v1alpha1.MaxDNSLabelLength, dnsLabelRE, MsgDNSLabel, false)...)
		}
	}
	if spec.ManifestConfigMapName != "" {
		errs = append(errs, validateString(spec.ManifestConfigMapName, fldPath.Child("manifestConfigMapName"), v1alpha1.MaxDNSSubdomainLength, dnsSubdomainRE, MsgDNSSubdomain, false)...)
	}
	if spec.ServiceAccountName != "" {
		errs = append(errs, validateString(spec.ServiceAccountName, fldPath.Child("serviceAccountName"), v1alpha1.MaxDNSSubdomainLength, dnsSubdomainRE, MsgDNSSubdomain, false)...)
	}
	if spec.RevisionHistoryLimit != nil {
		errs = append(errs, validateRange(int64(*spec.RevisionHistoryLimit), fldPath.Child("revisionHistoryLimit"), v1alpha1.MinRevisionHistoryLimit, v1alpha1.MaxRevisionHistoryLimit)...)
	}
	errs = append(errs, validateRolloutStrategy(&spec.RolloutStrategy, fldPath.Child("rolloutStrategy"))...)
	errs = append(errs, validateWhenUnschedulable(spec, fldPath)...)
	if spec.Verification != nil {
		errs = append(errs, validateVerification(spec.Verification, fldPath.Child("verification"))...)
	}
	return errs
}

// validateVerification checks spec.verification: the CRD's rules, then the
// Go-only ones (GoOnlyFields).
func validateVerification(v *v1alpha1.Verification, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	cond := fldPath.Child("successCondition")
	switch n := utf8.RuneCountInString(v.SuccessCondition); {
	case n == 0:
		errs = append(errs, field.Required(cond, ""))
	case n > v1alpha1.MaxVerificationCondition:
		errs = append(errs, field.TooLong(cond, field.OmitValueType{}, v1alpha1.MaxVerificationCondition))
	default:
		if err := verify.Check(v.SuccessCondition); err != nil {
			errs = append(errs, field.Invalid(cond, field.OmitValueType{}, MsgSuccessCondition+err.Error()))
		}
	}
	if v.Attempts != nil {
		errs = append(errs, validateRange(int64(*v.Attempts), fldPath.Child("attempts"), 1, v1alpha1.MaxVerificationAttempts)...)
	}
	if v.IntervalSeconds != nil {
		errs = append(errs, validateRange(int64(*v.IntervalSeconds), fldPath.Child("intervalSeconds"), v1alpha1.MinVerificationInterval, v1alpha1.MaxVerificationInterval)...)
	}
	return append(errs, validateVerificationRequest(&v.Request, fldPath.Child("request"))...)
}

func validateVerificationRequest(r *v1alpha1.VerificationRequest, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !validPort(r.Port) {
		errs = append(errs, field.Invalid(fldPath.Child("port"), field.OmitValueType{}, MsgVerificationPort))
	}
	switch p := fldPath.Child("path"); {
	case utf8.RuneCountInString(r.Path) > v1alpha1.MaxVerificationPath:
		errs = append(errs, field.TooLong(p, field.OmitValueType{}, v1alpha1.MaxVerificationPath))
	case !strings.HasPrefix(r.Path, "/"):
		errs = append(errs, field.Invalid(p, field.OmitValueType{}, MsgVerificationPath))
	}
	switch r.Method {
	case "GET", "POST", "PUT":
	default:
		errs = append(errs, field.NotSupported(fldPath.Child("method"), field.OmitValueType{}, verificationMethods))
	}
	if utf8.RuneCountInString(r.Body) > v1alpha1.MaxVerificationBody {
		errs = append(errs, field.TooLong(fldPath.Child("body"), field.OmitValueType{}, v1alpha1.MaxVerificationBody))
	}
	if r.TimeoutSeconds != nil {
		errs = append(errs, validateRange(int64(*r.TimeoutSeconds), fldPath.Child("timeoutSeconds"), 1, v1alpha1.MaxVerificationTimeout)...)
	}
	return append(errs, validateHeaders(r.Headers, fldPath.Child("headers"))...)
}

// validateHeaders checks the headers list: its size, its map key (name) and
// each item, as the CRD's list-map schema and the item's CEL rule do.
func validateHeaders(headers []v1alpha1.VerificationHeader, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(headers) > v1alpha1.MaxVerificationHeaders {
		errs = append(errs, field.TooMany(fldPath, len(headers), v1alpha1.MaxVerificationHeaders))
	}
	seen := make(map[string]bool, len(headers))
	for i, h := range headers {
		p := fldPath.Index(i)
		if h.Name != "" && seen[h.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), field.OmitValueType{}))
		}
		seen[h.Name] = true
		errs = append(errs, validateString(h.Name, p.Child("name"), 256, headerNameRE, MsgHeaderName, true)...)
		if h.Value != nil && utf8.RuneCountInString(*h.Value) > v1alpha1.MaxVerificationHeaderValue {
			errs = append(errs, field.TooLong(p.Child("value"), field.OmitValueType{}, v1alpha1.MaxVerificationHeaderValue))
		}
		if (h.Value != nil) == (h.ValueFrom != nil) {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, MsgHeaderValueSource))
		}
		if h.ValueFrom != nil {
			ref := &h.ValueFrom.SecretKeyRef
			rp := p.Child("valueFrom", "secretKeyRef")
			errs = append(errs, validateString(ref.Name, rp.Child("name"), v1alpha1.MaxDNSSubdomainLength, dnsSubdomainRE, MsgDNSSubdomain, true)...)
			errs = append(errs, validateString(ref.Key, rp.Child("key"), v1alpha1.MaxDNSSubdomainLength, secretKeyRE, MsgSecretKey, true)...)
		}
	}
	return errs
}

// validPort reports whether a verification port can name a container port,
// as a kubelet's httpGet probe needs: a number from 1 to 65535 or an
// IANA_SVC_NAME.
func validPort(p intstr.IntOrString) bool {
	if p.Type == intstr.Int {
		return len(utilvalidation.IsValidPortNum(int(p.IntVal))) == 0
	}
	return len(utilvalidation.IsValidPortName(p.StrVal)) == 0
}

// validateWhenUnschedulable checks rolloutStrategy.whenUnschedulable and
// its fields: the field rules, then the CEL rules on spec, each as the CRD
// states it.
func validateWhenUnschedulable(spec *v1alpha1.OpenMedModelSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	rs := &spec.RolloutStrategy
	p := fldPath.Child("rolloutStrategy")
	switch rs.WhenUnschedulable {
	case "", v1alpha1.UnschedulableWait, v1alpha1.UnschedulableReplaceInPlace:
	default:
		errs = append(errs, field.NotSupported(p.Child("whenUnschedulable"), field.OmitValueType{}, []string{"Wait", "ReplaceInPlace"}))
	}
	if v := rs.UnschedulableSeconds; v != nil {
		errs = append(errs, validateRange(int64(*v), p.Child("unschedulableSeconds"), 0, v1alpha1.MaxUnschedulableSeconds)...)
	}
	if v := rs.MinAvailable; v != nil {
		errs = append(errs, validateRange(int64(*v), p.Child("minAvailable"), 0, v1alpha1.MaxReplicas)...)
	}
	replace := rs.WhenUnschedulable == v1alpha1.UnschedulableReplaceInPlace
	if replace && rs.Type != v1alpha1.RollingUpdateRolloutStrategyType {
		errs = append(errs, field.Invalid(fldPath.Root(), field.OmitValueType{}, MsgReplaceInPlaceType))
	}
	if !replace && (rs.UnschedulableSeconds != nil || rs.MinAvailable != nil) {
		errs = append(errs, field.Invalid(fldPath.Root(), field.OmitValueType{}, MsgReplaceInPlaceFields))
	}
	if rs.UnschedulableSeconds != nil && rs.ProgressDeadlineSeconds != nil && *rs.UnschedulableSeconds >= *rs.ProgressDeadlineSeconds {
		errs = append(errs, field.Invalid(fldPath.Root(), field.OmitValueType{}, MsgUnschedulableSeconds))
	}
	if rs.MinAvailable != nil && spec.Replicas != nil && *rs.MinAvailable > *spec.Replicas {
		errs = append(errs, field.Invalid(fldPath.Root(), field.OmitValueType{}, MsgMinAvailable))
	}
	return errs
}

func validateRolloutStrategy(rs *v1alpha1.RolloutStrategy, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch rs.Type {
	case v1alpha1.RollingUpdateRolloutStrategyType, v1alpha1.RecreateRolloutStrategyType:
	case "":
		errs = append(errs, field.Required(fldPath.Child("type"), ""))
	default:
		errs = append(errs, field.Invalid(fldPath.Child("type"), field.OmitValueType{}, "must be RollingUpdate or Recreate"))
	}
	unavailableOK := validIntOrPercent(rs.MaxUnavailable)
	surgeOK := validIntOrPercent(rs.MaxSurge)
	if !unavailableOK {
		errs = append(errs, field.Invalid(fldPath.Child("maxUnavailable"), field.OmitValueType{}, MsgIntOrPercent))
	}
	if !surgeOK {
		errs = append(errs, field.Invalid(fldPath.Child("maxSurge"), field.OmitValueType{}, MsgIntOrPercent))
	}
	if rs.ProgressDeadlineSeconds != nil && *rs.ProgressDeadlineSeconds < 1 {
		errs = append(errs, field.Invalid(fldPath.Child("progressDeadlineSeconds"), field.OmitValueType{}, MsgProgressDeadln))
	}
	if b := rs.BakeSeconds; b != nil && (*b < 0 || *b > v1alpha1.MaxBakeSeconds) {
		errs = append(errs, field.Invalid(fldPath.Child("bakeSeconds"), field.OmitValueType{}, MsgBakeSeconds))
	}
	// The CEL rule on spec: absent counts as zero, as in the CRD rule (the API
	// server defaults the fields before the rule runs, so absent cannot happen
	// there).
	if rs.Type == v1alpha1.RollingUpdateRolloutStrategyType && isZero(rs.MaxUnavailable) && isZero(rs.MaxSurge) {
		errs = append(errs, field.Invalid(fldPath.Root(), field.OmitValueType{}, MsgBothZero))
	}
	return errs
}

// isZero reports whether v is 0 or "0%", the two spellings of zero
// the CRD rule knows. Absent (nil) counts as zero, as in the CRD rule.
func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	return v.StrVal == "0%"
}

func validIntOrPercent(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.Int {
		return v.IntVal >= 0
	}
	return len(v.StrVal) <= 4 && percentRE.MatchString(v.StrVal)
}

func validTier(t v1alpha1.Tier) bool {
	for _, valid := range v1alpha1.Tiers {
		if t == valid {
			return true
		}
	}
	return false
}

func validateString(s string, fldPath *field.Path, maxLen int, re *regexp.Regexp, msg string, required bool) field.ErrorList {
	switch {
	case s == "" && required:
		return field.ErrorList{field.Required(fldPath, "")}
	case s == "":
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must not be empty")}
	case len(s) > maxLen:
		return field.ErrorList{field.TooLong(fldPath, field.OmitValueType{}, maxLen)}
	case !re.MatchString(s):
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, msg)}
	}
	return nil
}

func validateRange(v int64, fldPath *field.Path, lo, hi int64) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, fmt.Sprintf("must be between %d and %d", lo, hi))}
	}
	return nil
}

// parseInt reads a JSON number as the API server does for an "integer" field:
// a whole number, spelled with or without a fraction or exponent.
func parseInt(n string) (int64, bool) {
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || f != float64(int64(f)) {
		return 0, false
	}
	return int64(f), true
}
