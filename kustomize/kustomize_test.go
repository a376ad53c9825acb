package kustomize_test

import (
	"context"
	"fmt"
	"github.com/fluxcd/pkg/ssa"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/webhook"
)

// overlay is what each install overlay must look like.
type overlay struct {
	name      string
	namespace string
	// clusterWide: a ClusterRole and --watch-all-namespaces=true, or a Role
	// and --watch-all-namespaces=false.
	clusterWide bool
}

var overlays = []overlay{
	{name: kustomize.DefaultOverlay, namespace: "openmed-system", clusterWide: true},
	{name: kustomize.NamespacedOverlay, namespace: "openmed-models", clusterWide: false},
	{name: kustomize.LockdownOverlay, namespace: "openmed-system", clusterWide: true},
}

func build(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// typed converts the one object of kind and name in objs into out.
func typed(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %s in the bundle", kind, name)
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// TestOverlaysRender checks what the API server cannot: the shape of the
// shipped install (scope, replicas, leader election, restricted pod
// security, resources, probes, and a NetworkPolicy that matches the ports).
func TestOverlaysRender(t *testing.T) {
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			objs := build(t, ov.name)
			got := kinds(objs)
			for _, want := range []string{
				"Namespace/" + ov.namespace, "CustomResourceDefinition/openmedmodels.openmed.ai",
				"ServiceAccount/openmed-operator", "Role/openmed-operator-leader-election",
				"RoleBinding/openmed-operator-leader-election", "Deployment/openmed-operator", "NetworkPolicy/openmed-operator",
				"ClusterRole/openmed-metrics-reader", "ClusterRole/openmed-profiler",
				"ValidatingWebhookConfiguration/openmed-operator", "Service/openmed-operator-webhook", "Secret/openmed-operator-webhook-cert",
				"Role/openmed-operator-webhook", "RoleBinding/openmed-operator-webhook",
				"ClusterRole/openmed-operator-webhook", "ClusterRoleBinding/openmed-operator-webhook",
			} {
				if !slices.Contains(got, want) {
					t.Errorf("bundle lacks %s; has %v", want, got)
				}
			}
			roleKind, bindingKind, allNamespaces := "Role", "RoleBinding", "--watch-all-namespaces=false"
			if ov.clusterWide {
				roleKind, bindingKind, allNamespaces = "ClusterRole", "ClusterRoleBinding", "--watch-all-namespaces=true"
			}
			for _, want := range []string{roleKind + "/openmed-operator", bindingKind + "/openmed-operator"} {
				if !slices.Contains(got, want) {
					t.Errorf("bundle lacks %s; has %v", want, got)
				}
			}
			// The namespaced install's only cluster-wide RBAC is the metrics
			// endpoint's, which reaches no object (the scrapers' roles on
			// its paths, and the operator's token and access reviews), and
			// the webhook's patch of its own configuration, by name.
			if !ov.clusterWide && slices.ContainsFunc(got, func(k string) bool {
				_, name, _ := strings.Cut(k, "/")
				return (strings.HasPrefix(k, "ClusterRole/") || strings.HasPrefix(k, "ClusterRoleBinding/")) && !namespacedClusterRBAC[name]
			}) {
				t.Errorf("namespaced bundle grants cluster-wide access: %v", got)
			}
			// A Role cannot grant the metrics endpoint's reviews, which
			// are cluster-scoped: the namespaced install has a ClusterRole
			// for them alone.
			if hasAuth := slices.Contains(got, "ClusterRole/openmed-operator-metrics-auth") && slices.Contains(got, "ClusterRoleBinding/openmed-operator-metrics-auth"); hasAuth == ov.clusterWide {
				t.Errorf("the ClusterRole openmed-operator-metrics-auth and its binding: %v, want them in the namespaced install only", hasAuth)
			}
			for _, o := range objs {
				switch o.GetKind() {
				case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration":
				default:
					if o.GetNamespace() != ov.namespace {
						t.Errorf("%s/%s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), ov.namespace)
					}
				}
				if o.GetLabels()["app.kubernetes.io/part-of"] != "openmed" {
					t.Errorf("%s/%s lacks the part-of label", o.GetKind(), o.GetName())
				}
			}

			var dep appsv1.Deployment
			typed(t, objs, "Deployment", "openmed-operator", &dep)
			checkDeployment(t, &dep, allNamespaces)
			lockdown := slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--default-service-account=default")
			if lockdown != (ov.name == kustomize.LockdownOverlay) {
				t.Errorf("--default-service-account=default in the args: %v, want it in the lockdown overlay only", lockdown)
			}
			var np networkingv1.NetworkPolicy
			typed(t, objs, "NetworkPolicy", "openmed-operator", &np)
			checkNetworkPolicy(t, &np, &dep)
			checkWebhook(t, objs, &dep, ov.namespace)
		})
	}
}

// checkWebhook: the ValidatingWebhookConfiguration calls the bundle's
// Service, which reaches the pods' webhook port; it is called for
// OpenMedModels with spec.verification only, never for their status, and
// an operator that is down does not stop an apply (failurePolicy Ignore).
func checkWebhook(t *testing.T, objs []*unstructured.Unstructured, dep *appsv1.Deployment, namespace string) {
	t.Helper()
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	typed(t, objs, "ValidatingWebhookConfiguration", webhook.ConfigurationName, &vwc)
	if len(vwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(vwc.Webhooks))
	}
	w := vwc.Webhooks[0]
	svc := w.ClientConfig.Service
	if w.Name != webhook.Name || svc == nil || svc.Namespace != namespace || svc.Path == nil || *svc.Path != webhook.Path || w.ClientConfig.URL != nil {
		t.Errorf("webhook %s calls %+v, want the Service in %s at %s", w.Name, w.ClientConfig, namespace, webhook.Path)
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore || w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("failurePolicy %v, sideEffects %v; want Ignore and None", w.FailurePolicy, w.SideEffects)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"openmedmodels"}) ||
		!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
		t.Errorf("rules %+v, want CREATE and UPDATE of openmedmodels only (not their status)", w.Rules)
	}
	if len(w.MatchConditions) != 1 || w.MatchConditions[0].Expression != "has(object.spec.verification)" {
		t.Errorf("matchConditions %+v, want objects with spec.verification only", w.MatchConditions)
	}
	var service corev1.Service
	typed(t, objs, "Service", svc.Name, &service)
	if !labels.SelectorFromSet(service.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(service.Spec.Ports) != 1 {
		t.Fatalf("Service %s selects %v with ports %+v; pods are labelled %v", service.Name, service.Spec.Selector, service.Spec.Ports, dep.Spec.Template.Labels)
	}
	port := service.Spec.Ports[0]
	if svcPort := ptr.Deref(svc.Port, 443); port.Port != svcPort || port.TargetPort.String() != "webhook" {
		t.Errorf("Service port %+v, want %d to the pods' webhook port", port, svcPort)
	}
	var secret corev1.Secret
	typed(t, objs, "Secret", "openmed-operator-webhook-cert", &secret)
	if len(secret.Data)+len(secret.StringData) > 0 {
		t.Error("the certificate Secret is shipped with data: applying the bundle again would overwrite the operator's certificate")
	}
}

func checkDeployment(t *testing.T, dep *appsv1.Deployment, allNamespaces string) {
	t.Helper()
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != "openmed-operator" {
		t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !strings.HasPrefix(c.Image, "ghcr.io/openmed/openmed-operator:") {
		t.Errorf("image = %q", c.Image)
	}
	for _, arg := range []string{allNamespaces, "--enable-leader-election", "--log-encoding=json"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext = %+v, want read-only root, no privilege escalation, drop ALL", sc)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("no %s request", res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("no %s limit", res)
		}
	}
	var runtimeNS bool
	for _, e := range c.Env {
		runtimeNS = runtimeNS || e.Name == "RUNTIME_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}
	if !runtimeNS {
		t.Error("RUNTIME_NAMESPACE is not taken from the pod's namespace")
	}

	// The probes and the flags must name the same ports.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for arg, port := range map[string]string{"--metrics-addr": "https-metrics", "--health-addr": "healthz", "--webhook-addr": "webhook"} {
		if want := fmt.Sprintf("%s=:%d", arg, ports[port]); !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s (port %s)", c.Args, want, port)
		}
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "healthz" {
			t.Errorf("probe for %s = %+v", path, probe)
		}
	}
}

func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, dep *appsv1.Deployment) {
	t.Helper()
	if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != dep.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("NetworkPolicy selects %v, pods are labelled %v", np.Spec.PodSelector.MatchLabels, dep.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes = %v", np.Spec.PolicyTypes)
	}
	// The metrics port admits the monitoring namespace only; the probe
	// port every source (the kubelet's probes), and so does the webhook's
	// (the API server is no pod).
	var ingress []string
	for _, rule := range np.Spec.Ingress {
		from := "anywhere"
		if len(rule.From) > 0 {
			from = fmt.Sprint(rule.From)
		}
		for _, p := range rule.Ports {
			ingress = append(ingress, p.Port.String()+" from "+from)
		}
	}
	slices.Sort(ingress)
	monitoring := fmt.Sprint([]networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}})
	if want := []string{"healthz from anywhere", "https-metrics from " + monitoring, "webhook from anywhere"}; !slices.Equal(ingress, want) {
		t.Errorf("ingress = %v, want only %v", ingress, want)
	}
	var egress []string
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			egress = append(egress, fmt.Sprintf("%s/%s", *p.Protocol, p.Port.String()))
		}
	}
	slices.Sort(egress)
	if want := []string{"TCP/443", "TCP/53", "TCP/6443", "UDP/53"}; !slices.Equal(egress, want) {
		t.Errorf("egress ports = %v, want %v", egress, want)
	}
}

// TestLockdownRoleFollowsTheGeneratedRole: the lockdown's ClusterRole is
// the one generated from the controller's markers without any write on
// Deployments, ConfigMaps and pods' status (the golden request's verdict),
// so a right the reconciler gains reaches the lockdown too (or this test
// names it).
func TestLockdownRoleFollowsTheGeneratedRole(t *testing.T) {
	rules := func(overlay string) []rbacv1.PolicyRule {
		var role rbacv1.ClusterRole
		typed(t, build(t, overlay), "ClusterRole", "openmed-operator", &role)
		return role.Rules
	}
	var want []rbacv1.PolicyRule
	for _, r := range rules(kustomize.DefaultOverlay) {
		if slices.Equal(r.Resources, []string{"pods/status"}) {
			continue
		}
		if slices.Contains(r.Resources, "deployments") || slices.Contains(r.Resources, "configmaps") {
			r.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v != "get" && v != "list" && v != "watch" })
		}
		want = append(want, r)
	}
	if got := rules(kustomize.LockdownOverlay); !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("lockdown ClusterRole rules:\n%+v\nwant the generated ones without writes on Deployments, ConfigMaps and pods/status:\n%+v", got, want)
	}
}

// namespacedClusterRBAC names the cluster-wide RBAC of the metrics endpoint
// and the webhook's patch of its own configuration, the only ones the
// namespaced install has.
var namespacedClusterRBAC = map[string]bool{"openmed-metrics-reader": true, "openmed-profiler": true, "openmed-operator-metrics-auth": true, "openmed-operator-webhook": true}

// metricsRoleURLs are the paths of the metrics endpoint each of the
// bundle's ClusterRoles for its scrapers allows.
var metricsRoleURLs = map[string][]string{
	"openmed-metrics-reader": {"/metrics"},
	"openmed-profiler":       {"/debug/pprof/*"},
}

// TestRBACHasNoWildcards guards what SubjectAccessReviews cannot enumerate:
// no rule grants every verb, resource or group, and non-resource URLs only
// the metrics endpoint's roles grant, each its own paths.
func TestRBACHasNoWildcards(t *testing.T) {
	for _, ov := range overlays {
		for _, o := range build(t, ov.name) {
			if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
				continue
			}
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
					t.Errorf("%s: %s %s has a wildcard rule %+v", ov.name, o.GetKind(), o.GetName(), r)
				}
				// Non-resource URLs only in the metrics endpoint's two
				// roles, each get on its own paths.
				if len(r.NonResourceURLs) > 0 && (o.GetKind() != "ClusterRole" ||
					!slices.Equal(r.NonResourceURLs, metricsRoleURLs[o.GetName()]) || !slices.Equal(r.Verbs, []string{"get"})) {
					t.Errorf("%s: %s %s grants non-resource URLs %+v", ov.name, o.GetKind(), o.GetName(), r)
				}
			}
		}
	}
}

// warnings collects the API server's warning headers (PodSecurity reports
// violations of a namespace's warn level this way).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// warningClient is an admin client that records warnings.
func warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// TestOverlaysApply applies each overlay to the real API server by
// server-side apply with strict field validation, in a namespace that warns
// on anything below the restricted Pod Security Standard, then applies it
// again and expects no object to change.
func TestOverlaysApply(t *testing.T) {
	ctx := context.Background()
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			c, w := warningClient(t)
			objs := build(t, ov.name)
			first, err := kustomize.Apply(ctx, c, objs)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.take(); len(got) > 0 {
				t.Errorf("first apply warned: %q", got)
			}
			if len(first.Entries) != len(objs) {
				t.Errorf("first apply reported %d objects, the bundle has %d", len(first.Entries), len(objs))
			}
			second, err := kustomize.Apply(ctx, c, objs)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range second.Entries {
				if e.Action != ssa.UnchangedAction {
					t.Errorf("second apply: %s %s", e.Subject, e.Action)
				}
			}

			// The namespace enforces the restricted level on pods: a pod
			// made from the shipped template is admitted (dry run), the
			// same pod without its security settings is refused.
			var dep appsv1.Deployment
			typed(t, objs, "Deployment", "openmed-operator", &dep)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ov.namespace, GenerateName: "openmed-operator-"},
				Spec:       *dep.Spec.Template.Spec.DeepCopy(),
			}
			if err := c.Create(ctx, pod.DeepCopy(), client.DryRunAll); err != nil {
				t.Errorf("a pod of the shipped template is not admitted: %v", err)
			}
			if got := w.take(); len(got) > 0 {
				t.Errorf("a pod of the shipped template drew warnings: %q", got)
			}
			pod.Spec.SecurityContext = nil
			pod.Spec.Containers[0].SecurityContext = nil
			if err := c.Create(ctx, pod, client.DryRunAll); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
				t.Errorf("a pod without security settings: err = %v, want a PodSecurity refusal", err)
			}
		})
	}
}

// access is one SubjectAccessReview and its expected answer.
type access struct {
	verb, group, resource, namespace string
	allowed                          bool
}

// namedAccess is a SubjectAccessReview of one object by name.
type namedAccess struct {
	access
	name string
}

// webhookAccess is what the webhook's rights allow in every install: get
// and update on its certificate Secret and patch on its configuration,
// each by name, and nothing else of Secrets or webhook configurations.
func webhookAccess(own, other string) []namedAccess {
	const secret = "openmed-operator-webhook-cert"
	return []namedAccess{
		{access{"get", "", "secrets", own, true}, secret},
		{access{"update", "", "secrets", own, true}, secret},
		{access{"get", "", "secrets", own, false}, "another-secret"},
		{access{"update", "", "secrets", own, false}, "another-secret"},
		{access{"delete", "", "secrets", own, false}, secret},
		{access{"create", "", "secrets", own, false}, ""},
		{access{"get", "", "secrets", other, false}, secret},
		{access{"patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", true}, webhook.ConfigurationName},
		{access{"patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", false}, "another-webhook"},
		{access{"delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", false}, webhook.ConfigurationName},
		{access{"create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", false}, ""},
		{access{"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", false}, webhook.ConfigurationName},
	}
}

// TestServiceAccountAccess asks the API server's authorizer what the
// bundle's ServiceAccount may do: what the reconciler needs (pods read-only),
// and nothing of Secrets, pod writes, Deployment creation or deletion,
// Services, Nodes or HPAs; the
// namespaced install nothing outside its namespace.
func TestServiceAccountAccess(t *testing.T) {
	ctx := context.Background()
	common := func(own, other string) []access {
		return []access{
			{"get", "openmed.ai", "openmedmodels", own, true},
			{"watch", "openmed.ai", "openmedmodels", own, true},
			{"patch", "openmed.ai", "openmedmodels/status", own, true},
			{"update", "openmed.ai", "openmedmodels/finalizers", own, true},
			{"watch", "apps", "deployments", own, true},
			{"patch", "apps", "deployments", own, true},
			{"create", "", "configmaps", own, true},
			{"delete", "", "configmaps", own, true},
			{"patch", "", "configmaps", own, true},
			{"create", "", "events", own, true},
			{"create", "coordination.k8s.io", "leases", own, true},
			{"update", "coordination.k8s.io", "leases", own, true},
			// The bake guard reads pods and never writes them.
			{"get", "", "pods", own, true},
			{"watch", "", "pods", own, true},

			{"create", "", "pods", own, false},
			{"patch", "", "pods", own, false},
			{"delete", "", "pods", own, false},
			{"update", "", "pods/status", own, false},
			{"get", "", "secrets", own, false},
			{"list", "", "secrets", "", false},
			{"watch", "", "secrets", other, false},
			{"create", "apps", "deployments", own, false},
			{"delete", "apps", "deployments", own, false},
			{"update", "apps", "deployments", own, false},
			{"get", "", "services", own, false},
			{"create", "", "services", own, false},
			{"list", "", "nodes", "", false},
			{"patch", "", "nodes", "", false},
			{"get", "autoscaling", "horizontalpodautoscalers", own, false},
			{"patch", "autoscaling", "horizontalpodautoscalers", own, false},
			// Leases only in the operator's own namespace.
			{"update", "coordination.k8s.io", "leases", other, false},
			// The metrics endpoint has each scrape authenticated and
			// authorized by the API server.
			{"create", "authentication.k8s.io", "tokenreviews", "", true},
			{"create", "authorization.k8s.io", "subjectaccessreviews", "", true},
		}
	}
	// The lockdown grants the same as the default install except the
	// writes on Deployments and ConfigMaps.
	lockdownCommon := func(own, other string) []access {
		var out []access
		for _, a := range common(own, other) {
			if (a.resource == "deployments" || a.resource == "configmaps") && a.allowed && a.verb != "get" && a.verb != "list" && a.verb != "watch" {
				a.allowed = false
			}
			out = append(out, a)
		}
		return out
	}
	cases := map[string][]access{
		kustomize.DefaultOverlay: append(common("openmed-system", "team-a"),
			access{"list", "openmed.ai", "openmedmodels", "", true},
			access{"watch", "apps", "deployments", "", true},
			access{"patch", "apps", "deployments", "team-a", true},
			access{"create", "", "configmaps", "team-a", true},
			// Impersonation only where a tenant binds it
			// (TestImpersonationIsPerNamespace).
			access{"impersonate", "", "serviceaccounts", "team-a", false},
			access{"impersonate", "", "serviceaccounts", "", false},
			access{"impersonate", "", "users", "", false},
		),
		kustomize.LockdownOverlay: append(lockdownCommon("openmed-system", "team-a"),
			access{"list", "openmed.ai", "openmedmodels", "", true},
			access{"watch", "apps", "deployments", "", true},
			access{"get", "", "configmaps", "team-a", true},
			access{"impersonate", "", "serviceaccounts", "team-a", false},
			access{"impersonate", "", "serviceaccounts", "", false},
			// No write of its own on what belongs to a tenant.
			access{"patch", "apps", "deployments", "team-a", false},
			access{"patch", "apps", "deployments", "openmed-system", false},
			access{"create", "", "configmaps", "team-a", false},
			access{"delete", "", "configmaps", "team-a", false},
			access{"update", "", "configmaps", "team-a", false},
			access{"patch", "", "configmaps", "team-a", false},
			// Users and groups are not impersonated: only ServiceAccounts.
			access{"impersonate", "", "users", "", false},
			access{"impersonate", "", "groups", "", false},
		),
		kustomize.NamespacedOverlay: append(common("openmed-models", "team-a"),
			access{"list", "openmed.ai", "openmedmodels", "", false},
			access{"list", "openmed.ai", "openmedmodels", "team-a", false},
			access{"watch", "apps", "deployments", "", false},
			access{"patch", "apps", "deployments", "team-a", false},
			access{"create", "", "configmaps", "team-a", false},
			access{"create", "", "events", "team-a", false},
			// Its own namespace is its only tenant.
			access{"impersonate", "", "serviceaccounts", "openmed-models", true},
			access{"impersonate", "", "serviceaccounts", "team-a", false},
		),
	}
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			if _, err := kustomize.Apply(ctx, env.Client, build(t, ov.name)); err != nil {
				t.Fatal(err)
			}
			user := "system:serviceaccount:" + ov.namespace + ":openmed-operator"
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ov.namespace, "system:authenticated"}
			all := webhookAccess(ov.namespace, "team-a")
			for _, a := range cases[ov.name] {
				all = append(all, namedAccess{access: a})
			}
			for _, a := range all {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Name: a.name},
				}}
				if err := env.Client.Create(ctx, sar); err != nil {
					t.Fatal(err)
				}
				if sar.Status.Allowed != a.allowed {
					t.Errorf("%s %s.%s %q in %q: allowed=%v, want %v (%s)", a.verb, a.resource, a.group, a.name, a.namespace, sar.Status.Allowed, a.allowed, sar.Status.Reason)
				}
			}
		})
	}
}
