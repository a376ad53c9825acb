package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/preview"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// online reads the cluster of the kubeconfig.
func (r *root) online() (source, error) {
	t, err := r.connect()
	if err != nil {
		return nil, err
	}
	return clusterSource{t}, nil
}

type clusterSource struct{ t target }

func (c clusterSource) namespace() string { return c.t.namespace }

func (c clusterSource) model(ctx context.Context, ns, name string) (*v1alpha1.OpenMedModel, error) {
	u, err := c.t.client.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s/%s: %w", kind, ns, name, err)
	}
	return typed(u)
}

func (c clusterSource) deployment(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	u, err := c.t.dyn.Resource(deploymentsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Deployment %s/%s: %w", ns, name, err)
	}
	return u, nil
}

func (c clusterSource) configMaps(ctx context.Context, ns string, owner *v1alpha1.OpenMedModel) ([]corev1.ConfigMap, error) {
	list, err := c.t.dyn.Resource(configMapsResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.ManagedByLabel + "=" + v1alpha1.ManagedByValue})
	if err != nil {
		return nil, fmt.Errorf("list ConfigMaps in %s: %w", ns, err)
	}
	return ownedConfigMaps(list.Items, owner)
}

var claimTemplatesResource = resourcev1.SchemeGroupVersion.WithResource("resourceclaimtemplates")

func (c clusterSource) claimTemplate(ctx context.Context, ns, name string) (preview.ClaimTemplate, error) {
	u, err := c.t.dyn.Resource(claimTemplatesResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return preview.ClaimTemplate{Name: name, Unreadable: "not found"}, nil
	case apierrors.IsForbidden(err):
		return preview.ClaimTemplate{Name: name, Unreadable: "you may not get resourceclaimtemplates (resource.k8s.io)"}, nil
	case err != nil:
		return preview.ClaimTemplate{}, fmt.Errorf("get ResourceClaimTemplate %s/%s: %w", ns, name, err)
	}
	return decodeClaimTemplate(u)
}

// decodeClaimTemplate converts a ResourceClaimTemplate read.
func decodeClaimTemplate(u *unstructured.Unstructured) (preview.ClaimTemplate, error) {
	t := &resourcev1.ResourceClaimTemplate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return preview.ClaimTemplate{}, fmt.Errorf("decode ResourceClaimTemplate %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return preview.ClaimTemplate{Name: t.Name, Template: t}, nil
}

// changes asks the API server: a server-side dry-run apply with the
// operator's field manager returns the Deployment as it would be stored.
// With a takeover (a foreign strategy.rollingUpdate under Recreate, which
// the operator first applies with values of its own to own it alone, then
// drops with the intent), the takeover is dry-run, since a dry run stores
// nothing for the second apply to start from; the intent's strategy is then
// the strategy the pass leaves, as the operator is its only manager.
func (c clusterSource) changes(ctx context.Context, live, takeover, intent *unstructured.Unstructured, keepReplicas bool) ([]preview.FieldChange, error) {
	client := c.t.dyn.Resource(deploymentsResource).Namespace(live.GetNamespace())
	opts := metav1.ApplyOptions{FieldManager: rollout.DefaultFieldManager, Force: true, DryRun: []string{metav1.DryRunAll}}
	first := intent
	if takeover != nil {
		first = takeover
	}
	if keepReplicas {
		// The pass first drops spec.replicas from the operator's entry, so
		// its apply leaves the live value: a dry run cannot start from
		// that first write, but one that applies the live value gives the
		// same Deployment.
		first = first.DeepCopy()
		if n, ok, _ := unstructured.NestedInt64(live.Object, "spec", "replicas"); ok {
			if err := unstructured.SetNestedField(first.Object, n, "spec", "replicas"); err != nil {
				return nil, err
			}
		}
	}
	// The dry run must start from the Deployment plan read (the Deployment
	// controller writes its revision annotation, an HPA the replicas):
	// with the read resourceVersion as a precondition, a change in between
	// is a conflict and the model is planned again on the new object.
	first = first.DeepCopy()
	first.SetResourceVersion(live.GetResourceVersion())
	after, err := client.Apply(ctx, first.GetName(), first, opts)
	if apierrors.IsConflict(err) {
		return nil, errLiveChanged
	}
	if err != nil {
		return nil, fmt.Errorf("dry-run apply to Deployment %s/%s: %w", live.GetNamespace(), live.GetName(), err)
	}
	if takeover != nil {
		if strategy, ok, _ := unstructured.NestedMap(intent.Object, "spec", "strategy"); ok {
			if err := unstructured.SetNestedMap(after.Object, strategy, "spec", "strategy"); err != nil {
				return nil, err
			}
		}
	}
	return preview.Diff(live, after), nil
}

// ownedConfigMaps converts the manifest ConfigMaps owned by owner.
func ownedConfigMaps(items []unstructured.Unstructured, owner *v1alpha1.OpenMedModel) ([]corev1.ConfigMap, error) {
	var out []corev1.ConfigMap
	for i := range items {
		owned := false
		for _, ref := range items[i].GetOwnerReferences() {
			owned = owned || ref.UID == owner.UID
		}
		if !owned {
			continue
		}
		var cm corev1.ConfigMap
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(items[i].Object, &cm); err != nil {
			return nil, err
		}
		out = append(out, cm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// offline reads Deployments and the ResourceClaimTemplates beside them
// from files.
func (r *root) offline(files string) (source, error) {
	src := fileSource{deployments: map[string]*unstructured.Unstructured{}, claimTemplates: map[string]*unstructured.Unstructured{}, ns: "default"}
	if ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(r.rules, r.overrides).Namespace(); err == nil && ns != "" {
		src.ns = ns
	}
	err := eachObject(strings.Split(files, ","), func(_ string, u *unstructured.Unstructured) error {
		if u.GroupVersionKind() == appsv1.SchemeGroupVersion.WithKind("Deployment") {
			if u.GetNamespace() == "" {
				u.SetNamespace(src.ns)
			}
			src.deployments[u.GetNamespace()+"/"+u.GetName()] = u
		}
		if u.GroupVersionKind() == resourcev1.SchemeGroupVersion.WithKind("ResourceClaimTemplate") {
			if u.GetNamespace() == "" {
				u.SetNamespace(src.ns)
			}
			src.claimTemplates[u.GetNamespace()+"/"+u.GetName()] = u
		}
		return nil
	})
	if err == nil && len(src.deployments) == 0 {
		err = fmt.Errorf("no Deployment in %s", files)
	}
	return src, err
}

type fileSource struct {
	deployments    map[string]*unstructured.Unstructured
	claimTemplates map[string]*unstructured.Unstructured
	ns             string
}

func (f fileSource) namespace() string { return f.ns }

func (f fileSource) model(context.Context, string, string) (*v1alpha1.OpenMedModel, error) {
	return nil, nil
}

func (f fileSource) deployment(_ context.Context, ns, name string) (*unstructured.Unstructured, error) {
	return f.deployments[ns+"/"+name], nil
}

func (f fileSource) configMaps(context.Context, string, *v1alpha1.OpenMedModel) ([]corev1.ConfigMap, error) {
	return nil, nil
}

func (f fileSource) claimTemplate(_ context.Context, ns, name string) (preview.ClaimTemplate, error) {
	u, ok := f.claimTemplates[ns+"/"+name]
	if !ok {
		return preview.ClaimTemplate{Name: name, Unreadable: "not in the --target files"}, nil
	}
	return decodeClaimTemplate(u)
}

func (f fileSource) changes(_ context.Context, live, _, intent *unstructured.Unstructured, _ bool) ([]preview.FieldChange, error) {
	return preview.Overlay(live, intent), nil
}

func (f fileSource) access(context.Context, string, string, []preview.Need) string {
	return "not checked (offline)"
}

var (
	serviceAccountsResource = corev1.SchemeGroupVersion.WithResource("serviceaccounts")
	accessReviewsResource   = authorizationv1.SchemeGroupVersion.WithResource("subjectaccessreviews")
)

// access asks the API server's authorizer, with one SubjectAccessReview per
// kind of request, whether the ServiceAccount ns/sa may make them, as the
// operator's impersonated requests will be authorized. It names what it may
// not and, for the verifier's requests, what follows. It says so when the
// ServiceAccount does not exist (the operator then writes nothing), and
// that it could not check when the caller may not create
// SubjectAccessReviews.
func (c clusterSource) access(ctx context.Context, ns, sa string, needs []preview.Need) string {
	if _, err := c.t.dyn.Resource(serviceAccountsResource).Namespace(ns).Get(ctx, sa, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Sprintf("ServiceAccount %s/%s does not exist: the operator writes nothing as it (AccessDenied)", ns, sa)
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	var may, mayNot, then []string
	for _, n := range needs {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: n.Verb, Group: n.Group, Resource: n.Resource,
				Subresource: n.Subresource, Name: n.Name},
		}}
		body, err := runtime.DefaultUnstructuredConverter.ToUnstructured(review)
		if err != nil {
			return "could not check: " + err.Error()
		}
		u := &unstructured.Unstructured{Object: body}
		u.SetAPIVersion(authorizationv1.SchemeGroupVersion.String())
		u.SetKind("SubjectAccessReview")
		answer, err := c.t.dyn.Resource(accessReviewsResource).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			if apierrors.IsForbidden(err) {
				return "could not check: you may not create subjectaccessreviews (authorization.k8s.io)"
			}
			return "could not check: " + err.Error()
		}
		allowed, _, _ := unstructured.NestedBool(answer.Object, "status", "allowed")
		switch {
		case allowed:
			may = append(may, n.String())
		default:
			mayNot = append(mayNot, n.String())
			if n.Without != "" {
				then = append(then, fmt.Sprintf("without %s, %s", n, n.Without))
			}
		}
	}
	if len(mayNot) > 0 {
		msg := fmt.Sprintf("may NOT %s: the operator's requests will be denied (AccessDenied) until it may", strings.Join(mayNot, ", "))
		for _, t := range then {
			msg += "; " + t
		}
		return msg
	}
	return "may " + strings.Join(may, ", ")
}
