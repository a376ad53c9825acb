package kustomize_test

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// TestMonitoringExamplesMatchTheBundle checks what promtool cannot in
// examples/monitoring: the PodMonitor's and the ServiceMonitor's endpoints
// scrape the Deployment's metrics port over HTTPS under the job the alerts
// select (the Service in front of it selects the operator's pods), the
// PodMonitor sends the token of the ServiceAccount its Secret belongs to,
// and each example's ClusterRoleBinding, applied to the real API server
// beside the bundle, lets its subject get /metrics and nothing else of the
// endpoint.
func TestMonitoringExamplesMatchTheBundle(t *testing.T) {
	ctx := context.Background()
	bundle := build(t, kustomize.DefaultOverlay)
	if _, err := kustomize.Apply(ctx, env.Client, bundle); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	typed(t, bundle, "Deployment", "openmed-operator", &dep)
	pod := dep.Spec.Template
	ports := map[string]bool{}
	for _, p := range pod.Spec.Containers[0].Ports {
		ports[p.Name] = true
	}
	const job = "openmed-operator" // the job examples/monitoring/rules.yaml selects

	for _, file := range []string{"podmonitor.yaml", "servicemonitor.yaml"} {
		t.Run(file, func(t *testing.T) {
			objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "monitoring", file))
			if err != nil {
				t.Fatal(err)
			}
			var subjects []rbacv1.Subject
			for _, o := range objs {
				switch o.GetKind() {
				case "PodMonitor", "ServiceMonitor":
					checkMonitor(t, o, ports, pod.Labels, objs, job)
					continue // no CRD in the test's API server
				case "ClusterRoleBinding":
					var b rbacv1.ClusterRoleBinding
					convert(t, o, &b)
					if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != localrun.MetricsReaderRole {
						t.Errorf("ClusterRoleBinding %s binds %s %s, want ClusterRole %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, localrun.MetricsReaderRole)
					}
					subjects = append(subjects, b.Subjects...)
				case "Service":
					var svc corev1.Service
					convert(t, o, &svc)
					if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(svc.Spec.Selector) == 0 {
						t.Errorf("Service %s selects %v, the operator's pods are labelled %v", svc.Name, svc.Spec.Selector, pod.Labels)
					}
					for _, p := range svc.Spec.Ports {
						if !ports[p.TargetPort.String()] {
							t.Errorf("Service %s targets port %s, the operator's container has %v", svc.Name, p.TargetPort.String(), ports)
						}
					}
				}
				if o.GetNamespace() != "" && o.GetNamespace() != dep.Namespace {
					t.Errorf("%s %s is in namespace %s, the operator in %s", o.GetKind(), o.GetName(), o.GetNamespace(), dep.Namespace)
				}
				if err := env.Client.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
			if len(subjects) == 0 {
				t.Fatal("no ClusterRoleBinding lets anyone read /metrics")
			}
			for _, s := range subjects {
				user := "system:serviceaccount:" + s.Namespace + ":" + s.Name
				review := func(path string) *authorizationv1.SubjectAccessReview {
					sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + s.Namespace, "system:authenticated"},
						NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
					}}
					if err := env.Client.Create(ctx, sar); err != nil {
						t.Fatal(err)
					}
					return sar
				}
				// The RBAC authorizer learns a new binding from its
				// informer a moment after the create: the allowed path
				// is asked until it answers (10 s at most), and the denied
				// one only then, when the binding is known.
				sar := review("/metrics")
				for end := time.Now().Add(10 * time.Second); !sar.Status.Allowed && time.Now().Before(end); sar = review("/metrics") {
					time.Sleep(100 * time.Millisecond)
				}
				if !sar.Status.Allowed {
					t.Errorf("%s may get /metrics: false, want true (%s)", user, sar.Status.Reason)
				}
				if sar := review("/debug/pprof/heap"); sar.Status.Allowed {
					t.Errorf("%s may get /debug/pprof/heap: true, want false (%s)", user, sar.Status.Reason)
				}
			}
		})
	}
}

// checkMonitor checks a PodMonitor's or ServiceMonitor's selector, job and
// endpoints.
func checkMonitor(t *testing.T, o *unstructured.Unstructured, ports map[string]bool, podLabels map[string]string, objs []*unstructured.Unstructured, job string) {
	t.Helper()
	field, jobFrom := "podMetricsEndpoints", podLabels
	if o.GetKind() == "ServiceMonitor" {
		field, jobFrom = "endpoints", nil
		for _, svc := range objs {
			if svc.GetKind() == "Service" {
				jobFrom = svc.GetLabels()
			}
		}
	}
	selector, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(jobFrom)) {
		t.Errorf("%s selects %v, the scraped objects are labelled %v", o.GetKind(), selector, jobFrom)
	}
	jobLabel, _, _ := unstructured.NestedString(o.Object, "spec", "jobLabel")
	if jobFrom[jobLabel] != job {
		t.Errorf("%s: jobLabel %q gives the job %q, the alerts select %q", o.GetKind(), jobLabel, jobFrom[jobLabel], job)
	}
	endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", field)
	if len(endpoints) == 0 {
		t.Fatalf("%s has no %s", o.GetKind(), field)
	}
	for _, e := range endpoints {
		ep := e.(map[string]any)
		port, _ := ep["port"].(string)
		if !ports[port] || ep["scheme"] != "https" || ep["path"] != "/metrics" {
			t.Errorf("%s endpoint scrapes %v://…:%v%v, want https on one of %v, /metrics", o.GetKind(), ep["scheme"], port, ep["path"], slices.Sorted(maps.Keys(ports)))
		}
		// The PodMonitor sends the token of its Secret, which must belong
		// to the ServiceAccount the binding names.
		secret, found, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
		if !found {
			continue
		}
		var owner string
		for _, s := range objs {
			if s.GetKind() == "Secret" && s.GetName() == secret {
				owner = s.GetAnnotations()[corev1.ServiceAccountNameKey]
			}
		}
		var bound bool
		for _, b := range objs {
			if b.GetKind() != "ClusterRoleBinding" {
				continue
			}
			var crb rbacv1.ClusterRoleBinding
			convert(t, b, &crb)
			bound = bound || slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == owner && s.Namespace == o.GetNamespace()
			})
		}
		if owner == "" || !bound {
			t.Errorf("%s sends the token of Secret %s (ServiceAccount %q), which no ClusterRoleBinding of the file binds", o.GetKind(), secret, owner)
		}
	}
}

func convert(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatal(err)
	}
}
