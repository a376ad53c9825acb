// Package webhook is the operator's validating admission webhook for
// OpenMedModels. The CRD states every rule of an OpenMedModel but one: the
// API server cannot compile the CEL expression held in
// spec.verification.successCondition (validation.GoOnlyFields). The webhook
// runs the Go validator, which does, so an expression that does not compile
// is refused at apply time with CEL's complaint, as an Invalid status naming
// the field.
//
// The webhook is served by the operator itself. Its serving certificate
// comes from a directory the user fills (cert-manager), or from a CA and
// certificate the operator generates and keeps in a Secret of its own
// namespace, so every replica serves the same one; the operator then writes
// that CA into its ValidatingWebhookConfiguration's caBundle (Provisioner).
//
// The ValidatingWebhookConfiguration is generated from the markers below
// (`make generate`, kustomize/webhook). Its failurePolicy is Ignore: an
// operator that is down or unreachable must not stop GitOps applies, nor
// the removal of a finalizer during an uninstall, and a spec that gets in
// while it is down is still refused in the model's status (a SpecError) by
// the reconciler, which runs the same validator. matchConditions send the
// webhook only objects with spec.verification, the only ones it can refuse
// that the CRD did not already. The rules name openmedmodels only, never
// openmedmodels/status: the operator's status writes never wait for it.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/validation"
)

// The names the generated ValidatingWebhookConfiguration and the operator
// share.
const (
	// Path is where the webhook server serves the validation.
	Path = "/validate-openmed-ai-v1alpha1-openmedmodel"
	// ConfigurationName is the ValidatingWebhookConfiguration's name; the
	// operator may patch that object and no other.
	ConfigurationName = "openmed-operator"
	// Name is the webhook's name within the configuration; the API server
	// quotes it in a refusal ("admission webhook %q denied the request").
	Name = "validate.openmedmodels.openmed.ai"
)

// +kubebuilder:webhookconfiguration:mutating=false,name=openmed-operator
// +kubebuilder:webhook:path=/validate-openmed-ai-v1alpha1-openmedmodel,mutating=false,failurePolicy=ignore,sideEffects=None,matchPolicy=Equivalent,timeoutSeconds=5,groups=openmed.ai,resources=openmedmodels,verbs=create;update,versions=v1alpha1,name=validate.openmedmodels.openmed.ai,admissionReviewVersions=v1,serviceName=openmed-operator-webhook,serviceNamespace=system,patch=`{"matchConditions":[{"name":"has-verification","expression":"has(object.spec.verification)"}]}`

// Validator is the admission handler: it decodes the request's objects and
// answers with Review's verdict.
type Validator struct{}

var _ admission.Handler = Validator{}

// Handle answers one AdmissionReview.
func (Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	var old *v1alpha1.OpenMedModel
	if req.Operation == admissionv1.Update {
		old = &v1alpha1.OpenMedModel{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the stored OpenMedModel: %w", err))
		}
	}
	obj := &v1alpha1.OpenMedModel{}
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the OpenMedModel: %w", err))
	}
	errs := Review(old, obj)
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	// An Invalid status, as the API server's own validation answers: code
	// 422, the kind and name, and one cause per field. The API server
	// prefixes the message with the webhook's name and keeps the rest.
	status := apierrors.NewInvalid(groupKind, obj.Name, errs).Status()
	resp := admission.Denied(status.Message)
	resp.Result = &status
	return resp
}

// groupKind is the kind an Invalid status names.
var groupKind = v1alpha1.GroupVersion.WithKind("OpenMedModel").GroupKind()

// Review is the webhook's verdict on a create (old nil) or an update of
// old to obj: the Go validator's complaints about obj, on its defaults.
// An object being deleted is never refused (its finalizer must be able to
// go), and an update is refused only for a complaint old does not have
// already, as the API server ratchets a CRD's own rules: an object stored
// before the webhook existed (or while it was unreachable) keeps taking
// label, annotation, finalizer and other changes, and the operator refuses
// its spec in status.
func Review(old, obj *v1alpha1.OpenMedModel) field.ErrorList {
	if obj.DeletionTimestamp != nil {
		return nil
	}
	errs := complaints(obj)
	if old == nil || len(errs) == 0 {
		return errs
	}
	had := map[string]bool{}
	for _, e := range complaints(old) {
		had[e.Error()] = true
	}
	var fresh field.ErrorList
	for _, e := range errs {
		if !had[e.Error()] {
			fresh = append(fresh, e)
		}
	}
	return fresh
}

// complaints validates a defaulted copy of obj.
func complaints(obj *v1alpha1.OpenMedModel) field.ErrorList {
	obj = obj.DeepCopy()
	obj.Default()
	return validation.ValidateOpenMedModel(obj)
}
