// Package validation checks OpenMedModel objects with exactly the rules the
// CRD makes the API server enforce (OpenAPI schema, strict field validation and
// CEL), so a library user or the operator can reject what the server would
// reject, with the same verdict. A differential test against a real API server
// keeps the two copies equal.
//
// Messages never echo user values: they name the field and the rule only.
package validation

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

var (
	familyRE       = regexp.MustCompile(v1alpha1.FamilyPattern)
	versionRE      = regexp.MustCompile(v1alpha1.VersionPattern)
	dnsSubdomainRE = regexp.MustCompile(v1alpha1.DNSSubdomainPattern)
	dnsLabelRE     = regexp.MustCompile(v1alpha1.DNSLabelPattern)
	percentRE      = regexp.MustCompile(v1alpha1.PercentPattern)
)

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
)

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
	return errs
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
