package localrun

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountUser is the user name the API server gives a ServiceAccount's
// tokens: system:serviceaccount:<namespace>:<name>.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// serviceAccountGroups are the groups the API server puts a ServiceAccount
// in; impersonation sets them too, so bindings to these groups apply as they
// would in a pod.
func serviceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}
}

// WriteImpersonatingKubeconfig writes to dst a kubeconfig with only the
// current context of src (files embedded), whose requests impersonate the
// ServiceAccount namespace/name. A process using it is authorized exactly as
// the operator's ServiceAccount is in the cluster, so it runs on the RBAC the
// install bundle grants, not on the caller's own rights; the caller needs
// the right to impersonate (cluster-admin has it). An empty src means the
// client-go default: $KUBECONFIG, then ~/.kube/config.
func WriteImpersonatingKubeconfig(src, dst, namespace, name string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if src != "" {
		rules.ExplicitPath = src
	}
	cfg, err := rules.Load()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if err := clientcmdapi.MinifyConfig(cfg); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	for _, ctx := range cfg.Contexts {
		auth := cfg.AuthInfos[ctx.AuthInfo]
		if auth == nil {
			return fmt.Errorf("kubeconfig: context names user %q, which it does not define", ctx.AuthInfo)
		}
		auth.Impersonate = ServiceAccountUser(namespace, name)
		auth.ImpersonateGroups = serviceAccountGroups(namespace)
	}
	return clientcmd.WriteToFile(*cfg, dst)
}
