package rollout

import (
	"fmt"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// The identity a model's writes are made as, and the binding that lets the
// operator impersonate it (see the tenancy documentation).

// WritesAs is the ServiceAccount, of obj's namespace, whose identity the
// operator's writes for obj are made with: spec.serviceAccountName, else
// defaultServiceAccount (the operator's --default-service-account); empty
// when the operator writes with its own rights.
func WritesAs(obj *v1alpha1.OpenMedModel, defaultServiceAccount string) string {
	if obj.Spec.ServiceAccountName != "" {
		return obj.Spec.ServiceAccountName
	}
	return defaultServiceAccount
}

// ImpersonatorRole is the install bundle's ClusterRole that grants
// impersonation of ServiceAccounts and nothing else, and the name of the
// RoleBinding that binds it to the operator's ServiceAccount in a tenant
// namespace (examples/tenancy/impersonator-binding.yaml). The bundle binds
// it nowhere, so the operator impersonates only in the namespaces that
// have the binding. A test keeps the bundle and the example in step with
// this name.
const ImpersonatorRole = "openmed-impersonator"

// ImpersonationDenied is the detail of a write whose impersonation the API
// server refused in namespace (MsgImpersonationDenied).
func ImpersonationDenied(namespace string) string {
	return fmt.Sprintf(MsgImpersonationDenied, namespace)
}
