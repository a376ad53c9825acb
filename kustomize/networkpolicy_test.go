package kustomize_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// TestNetworkPolicyExampleFitsTheExamples checks
// examples/networkpolicy/verification.yaml, the optional pair that lets the
// operator send the golden request through NetworkPolicies, against what it
// names: its egress policy selects the default bundle's operator pods, in
// the bundle's namespace, and adds egress (only) to the pods of
// examples/target-deployment.yaml in their namespace, on the container port
// the documented golden request names (http); its ingress policy selects
// those pods, in their namespace, and admits the operator's pods on that
// port (only ingress); the API server accepts both.
func TestNetworkPolicyExampleFitsTheExamples(t *testing.T) {
	ctx := context.Background()
	var operator appsv1.Deployment
	typed(t, build(t, kustomize.DefaultOverlay), "Deployment", "openmed-operator", &operator)
	targetObjs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "target-deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var target appsv1.Deployment
	typed(t, targetObjs, "Deployment", "openmed-service", &target)
	var port int32
	for _, p := range target.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "http" {
			port = p.ContainerPort
		}
	}
	if port == 0 {
		t.Fatalf("the target's container has no port named http: %+v", target.Spec.Template.Spec.Containers[0].Ports)
	}

	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "networkpolicy", "verification.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var egress, ingress *networkingv1.NetworkPolicy
	for _, o := range objs {
		if o.GetKind() != "NetworkPolicy" {
			t.Errorf("%s %s: the file holds NetworkPolicies only", o.GetKind(), o.GetName())
			continue
		}
		var np networkingv1.NetworkPolicy
		convert(t, o, &np)
		switch {
		case slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) && egress == nil:
			egress = &np
		case slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) && ingress == nil:
			ingress = &np
		default:
			t.Errorf("NetworkPolicy %s has policyTypes %v: want one Egress-only and one Ingress-only policy", np.Name, np.Spec.PolicyTypes)
		}
	}
	if egress == nil || ingress == nil {
		t.Fatalf("want an egress and an ingress policy, got egress %v, ingress %v", egress != nil, ingress != nil)
	}

	operatorPods, modelPods := operator.Spec.Template.Labels, target.Spec.Template.Labels
	checkPolicy(t, egress, operator.Namespace, operatorPods, egress.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort) {
		return r.To, r.Ports
	}, target.Namespace, modelPods, port)
	checkPolicy(t, ingress, target.Namespace, modelPods, ingress.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort) {
		return r.From, r.Ports
	}, operator.Namespace, operatorPods, port)

	for _, ns := range []string{operator.Namespace, target.Namespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("the API server refuses NetworkPolicy %s: %v", o.GetName(), err)
		}
	}
}

// checkPolicy checks that np is in namespace, selects pods labelled
// selected, and has one rule, whose one peer is the pods labelled peerPods
// in peerNamespace, on TCP port only.
func checkPolicy[R any](t *testing.T, np *networkingv1.NetworkPolicy, namespace string, selected map[string]string, rules []R,
	parts func(R) ([]networkingv1.NetworkPolicyPeer, []networkingv1.NetworkPolicyPort), peerNamespace string, peerPods map[string]string, port int32) {
	t.Helper()
	if np.Namespace != namespace {
		t.Errorf("NetworkPolicy %s is in namespace %q, want %q", np.Name, np.Namespace, namespace)
	}
	if !selects(t, &np.Spec.PodSelector, selected) {
		t.Errorf("NetworkPolicy %s selects %v, want the pods labelled %v", np.Name, np.Spec.PodSelector, selected)
	}
	if len(rules) != 1 {
		t.Fatalf("NetworkPolicy %s has %d rules, want 1", np.Name, len(rules))
	}
	peers, ports := parts(rules[0])
	if len(peers) != 1 || peers[0].NamespaceSelector == nil || peers[0].PodSelector == nil ||
		!selects(t, peers[0].NamespaceSelector, map[string]string{corev1.LabelMetadataName: peerNamespace}) ||
		!selects(t, peers[0].PodSelector, peerPods) {
		t.Errorf("NetworkPolicy %s admits %+v, want the pods labelled %v in namespace %s", np.Name, peers, peerPods, peerNamespace)
	}
	if len(ports) != 1 || ports[0].Protocol == nil || *ports[0].Protocol != corev1.ProtocolTCP || ports[0].Port == nil ||
		ports[0].Port.IntValue() != int(port) || ports[0].EndPort != nil {
		var got []string
		for _, p := range ports {
			got = append(got, fmt.Sprintf("%v/%v (end %v)", ptr.Deref(p.Protocol, ""), p.Port, ptr.Deref(p.EndPort, 0)))
		}
		t.Errorf("NetworkPolicy %s opens %v, want TCP %d only", np.Name, got, port)
	}
}

// selects reports whether s selects objects labelled set, and not every
// object (an empty selector selects all pods, or all namespaces).
func selects(t *testing.T, s *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	if len(s.MatchLabels)+len(s.MatchExpressions) == 0 {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel.Matches(labels.Set(set))
}
