package preview_test

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/preview"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

func model(version string) *v1alpha1.OpenMedModel {
	m := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Name: "ner", Namespace: "models"},
		Spec: v1alpha1.OpenMedModelSpec{
			Family: "PII", Tier: "Small", Version: version, Replicas: ptr.To[int32](2),
			TargetRef:       &v1alpha1.TargetReference{Name: "ner"},
			RolloutStrategy: v1alpha1.RolloutStrategy{Type: "RollingUpdate"},
		},
	}
	m.Spec.Default()
	return m
}

func TestCommitted(t *testing.T) {
	live := model("v1")
	live.Generation = 4
	live.Annotations = map[string]string{"keep": "1"}
	live.Status.Phase = v1alpha1.PhaseReady

	tests := []struct {
		name           string
		file           *v1alpha1.OpenMedModel
		live           *v1alpha1.OpenMedModel
		wantGeneration int64
		wantPhase      v1alpha1.Phase
	}{
		{name: "new object", file: model("v1"), wantGeneration: 1},
		{name: "unchanged spec keeps the generation and the status", file: model("v1"), live: live, wantGeneration: 4, wantPhase: v1alpha1.PhaseReady},
		{name: "changed spec moves the generation", file: model("v2"), live: live, wantGeneration: 5, wantPhase: v1alpha1.PhaseReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := tt.file.DeepCopy()
			file.Annotations = map[string]string{v1alpha1.RollbackToAnnotation: "v0"}
			got := preview.Committed(file, tt.live)
			if got.Generation != tt.wantGeneration || got.Status.Phase != tt.wantPhase || got.Spec.Version != tt.file.Spec.Version {
				t.Errorf("generation %d phase %q version %s, want %d %q %s", got.Generation, got.Status.Phase, got.Spec.Version, tt.wantGeneration, tt.wantPhase, tt.file.Spec.Version)
			}
			if got.Annotations[v1alpha1.RollbackToAnnotation] != "v0" || (tt.live != nil && got.Annotations["keep"] != "1") {
				t.Errorf("annotations %v: want the file's over the live ones", got.Annotations)
			}
		})
	}
}

// TestAnnotations: a live annotation of the operator's that the file does
// not carry is removed by a client-side apply whose last-applied record
// holds it, and kept when nothing in Git set it (kubectl annotate, an Argo
// CD action). The server-side applier's case needs the API server's
// managedFields: TestPlanMatchesAct (e2e) commits the file as Flux does.
func TestAnnotations(t *testing.T) {
	file := model("v1")
	live := model("v1")
	live.Generation = 3
	live.Annotations = map[string]string{
		v1alpha1.RollbackToAnnotation:                      "v0",
		"reconcile.fluxcd.io/requestedAt":                  "now",
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"openmed.ai/v1alpha1","kind":"OpenMedModel","metadata":{"annotations":{"openmed.ai/rollback-to":"v0"},"name":"ner"}}`,
		"example.com/other":                                "not the operator's",
	}
	got, changes := preview.CommittedWith(file, live)
	want := []preview.AnnotationChange{{Key: "openmed.ai/rollback-to", Removed: true}, {Key: "reconcile.fluxcd.io/requestedAt"}}
	if len(changes) != len(want) {
		t.Fatalf("changes %+v, want %+v", changes, want)
	}
	for i := range want {
		if changes[i].Key != want[i].Key || changes[i].Removed != want[i].Removed {
			t.Errorf("change %d = %+v, want %+v", i, changes[i], want[i])
		}
	}
	if _, ok := got.Annotations[v1alpha1.RollbackToAnnotation]; ok {
		t.Errorf("the committed object keeps %s: %v", v1alpha1.RollbackToAnnotation, got.Annotations)
	}
	if got.Annotations["reconcile.fluxcd.io/requestedAt"] != "now" || got.Annotations["example.com/other"] == "" {
		t.Errorf("annotations nothing in Git set are gone: %v", got.Annotations)
	}
}

func obj(content map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: content}
}

func TestDiff(t *testing.T) {
	container := func(env ...any) map[string]any {
		return map[string]any{"name": "app", "image": "openmed:2.4.0", "env": env}
	}
	deployment := func(annotations map[string]any, replicas int64, containers ...any) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "ner", "annotations": annotations},
			"spec":     map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{"containers": containers}}},
		}
	}
	preload := map[string]any{"name": "PRELOAD", "value": "v1"}
	other := map[string]any{"name": "OTHER", "value": "x"}
	tests := []struct {
		name        string
		live, after map[string]any
		want        []string
		podsRoll    bool
	}{
		{name: "no change", live: deployment(nil, 2, container(other)), after: deployment(map[string]any{}, 2, container(other))},
		{name: "replicas", live: deployment(nil, 1, container()), after: deployment(nil, 2, container()), want: []string{".spec.replicas: 1 -> 2"}},
		{name: "an env entry added whole, by name", live: deployment(nil, 2, container(other)), after: deployment(nil, 2, container(other, preload)),
			want: []string{`.spec.template.spec.containers[name="app"].env[name="PRELOAD"]:  -> {"name":"PRELOAD","value":"v1"}`}, podsRoll: true},
		{name: "one field of an env entry", live: deployment(nil, 2, container(preload)), after: deployment(nil, 2, container(map[string]any{"name": "PRELOAD", "value": "v2"})),
			want: []string{`.spec.template.spec.containers[name="app"].env[name="PRELOAD"].value: "v1" -> "v2"`}, podsRoll: true},
		{name: "annotation key", live: deployment(map[string]any{"a": "1"}, 2), after: deployment(map[string]any{"a": "1", "b": "2"}, 2),
			want: []string{`.metadata.annotations.b:  -> "2"`}},
		{name: "the same annotation key when there were none", live: deployment(nil, 2), after: deployment(map[string]any{"b": "2"}, 2),
			want: []string{`.metadata.annotations.b:  -> "2"`}},
		{name: "an env entry when the container had no env", live: deployment(nil, 2, map[string]any{"name": "app"}), after: deployment(nil, 2, map[string]any{"name": "app", "env": []any{preload}}),
			want: []string{`.spec.template.spec.containers[name="app"].env[name="PRELOAD"]:  -> {"name":"PRELOAD","value":"v1"}`}, podsRoll: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes := preview.Diff(obj(tt.live), obj(tt.after))
			var got []string
			for _, c := range changes {
				got = append(got, c.Field+": "+c.From+" -> "+c.To)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if preview.TemplateChanges(changes) != tt.podsRoll {
				t.Errorf("TemplateChanges = %v, want %v", !tt.podsRoll, tt.podsRoll)
			}
		})
	}
}

// TestCapacityDRA: the capacity line counts, per surge pod, the devices of
// each claim the target's pod template makes from a ResourceClaimTemplate
// (each pod gets its own), says a shared claim needs no new device, and
// names a template the caller could not read rather than dropping it.
func TestCapacityDRA(t *testing.T) {
	exactly := func(class string, mode resourcev1.DeviceAllocationMode, count int64) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
	}
	template := func(name string, requests ...resourcev1.DeviceRequest) preview.ClaimTemplate {
		rct := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "models"}}
		rct.Spec.Spec.Devices.Requests = requests
		return preview.ClaimTemplate{Name: name, Template: rct}
	}
	fromTemplate := func(claim, tmpl string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: ptr.To(tmpl)}
	}
	gpuLimit := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
		Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
	}
	const (
		surge = "1 pod more than its 2 replicas while the pods roll (maxSurge 1), each requesting "
		wait  = "; until a node has that free, the rollout waits (Ready=False/Unschedulable; whenUnschedulable: ReplaceInPlace would replace pods in place instead)"
	)
	tests := []struct {
		name      string
		resources corev1.ResourceRequirements
		claims    []corev1.PodResourceClaim
		templates []preview.ClaimTemplate
		want      string
	}{
		{name: "one device from a template", resources: gpuLimit,
			claims:    []corev1.PodResourceClaim{fromTemplate("gpu", "gpu-claim")},
			templates: []preview.ClaimTemplate{template("gpu-claim", exactly("gpu.nvidia.com", "", 0))},
			want:      surge + "cpu 500m, nvidia.com/gpu 1 and DRA devices: 1 of class gpu.nvidia.com (claim gpu from template gpu-claim)" + wait},
		{name: "two devices, and a second request",
			claims: []corev1.PodResourceClaim{fromTemplate("gpu", "gpu-pair")},
			templates: []preview.ClaimTemplate{template("gpu-pair",
				exactly("gpu.nvidia.com", resourcev1.DeviceAllocationModeExactCount, 2), exactly("rdma.example.com", "", 1))},
			want: surge + "DRA devices: 2 of class gpu.nvidia.com + 1 of class rdma.example.com (claim gpu from template gpu-pair)" + wait},
		{name: "all devices of a class",
			claims:    []corev1.PodResourceClaim{fromTemplate("gpus", "all-gpus")},
			templates: []preview.ClaimTemplate{template("all-gpus", exactly("gpu.nvidia.com", resourcev1.DeviceAllocationModeAll, 0))},
			want:      surge + "DRA devices: all devices of class gpu.nvidia.com on the node (claim gpus from template all-gpus)" + wait},
		{name: "a shared claim beside a template's", resources: gpuLimit,
			claims:    []corev1.PodResourceClaim{{Name: "cache", ResourceClaimName: ptr.To("model-cache")}, fromTemplate("gpu", "gpu-claim")},
			templates: []preview.ClaimTemplate{template("gpu-claim", exactly("gpu.nvidia.com", "", 1))},
			want: surge + "cpu 500m, nvidia.com/gpu 1 and DRA devices: no new device (claim cache shares ResourceClaim model-cache), " +
				"1 of class gpu.nvidia.com (claim gpu from template gpu-claim)" + wait},
		{name: "only a shared claim and no requests: nothing new",
			claims: []corev1.PodResourceClaim{{Name: "cache", ResourceClaimName: ptr.To("model-cache")}}},
		{name: "unreadable templates",
			claims:    []corev1.PodResourceClaim{fromTemplate("gpu", "gpu-claim"), fromTemplate("nic", "nic-claim"), fromTemplate("fpga", "fpga-claim")},
			templates: []preview.ClaimTemplate{{Name: "gpu-claim", Unreadable: "forbidden"}, {Name: "nic-claim", Unreadable: "not found"}},
			want: surge + "DRA devices: claim gpu from template gpu-claim (not readable: forbidden), claim nic from template nic-claim (not readable: not found), " +
				"claim fpga from template fpga-claim (not readable: not read)" + wait},
		{name: "first available of three",
			claims: []corev1.PodResourceClaim{fromTemplate("gpu", "any-gpu")},
			templates: []preview.ClaimTemplate{template("any-gpu", resourcev1.DeviceRequest{Name: "gpu", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "big", DeviceClassName: "h100.nvidia.com", Count: 1}, {Name: "mid", DeviceClassName: "a100.nvidia.com", Count: 2}, {Name: "small", DeviceClassName: "l4.nvidia.com", Count: 4},
			}})},
			want: surge + "DRA devices: 1 of class h100.nvidia.com or one of 2 alternatives (claim gpu from template any-gpu)" + wait},
		{name: "no claims, no requests", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ner", Namespace: "models"}}
			dep.Spec.Replicas = ptr.To[int32](2)
			dep.Spec.Template.Spec.Containers = []corev1.Container{{Name: "ner", Image: "openmed:2.4.0", Resources: tt.resources}}
			dep.Spec.Template.Spec.ResourceClaims = tt.claims
			file := model("v1")
			file.Spec.TargetRef.ContainerName = "ner"
			obj := preview.Committed(file, nil)
			res := preview.Model(obj, rollout.Observed{Deployment: dep, Now: metav1.Now()}, rollout.Options{}, tt.templates...)
			if res.Phase != v1alpha1.PhaseRollingOut {
				t.Fatalf("phase %s (%s), want %s", res.Phase, res.Message, v1alpha1.PhaseRollingOut)
			}
			if res.Capacity != tt.want {
				t.Errorf("Capacity:\n%s\nwant:\n%s", res.Capacity, tt.want)
			}
		})
	}
}

// TestGoldenRequest: a model's golden request is described with the API
// server's defaults, its headers by name (a Secret's named, with its key)
// and its body by size, never a value; the verifier's rights join the
// needs: patch pods/status for the verdicts, get on each header's Secret by
// name, and patch pods/status still while the target's pods carry the gate
// of a request declared no more.
func TestGoldenRequest(t *testing.T) {
	const body = `{"text":"Patient John Smith, seen 2024-03-05."}`
	secret := func(name, key string) *v1alpha1.HeaderValueSource {
		return &v1alpha1.HeaderValueSource{SecretKeyRef: v1alpha1.SecretKeySelector{Name: name, Key: key}}
	}
	verification := func(headers ...v1alpha1.VerificationHeader) *v1alpha1.Verification {
		return &v1alpha1.Verification{
			Request:          v1alpha1.VerificationRequest{Port: intstr.FromString("http"), Path: "/pii/extract", Headers: headers, Body: body},
			SuccessCondition: "response.code == 200",
		}
	}
	gated := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ner", Namespace: "models"}}
	gated.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.VerifiedCondition}}
	tests := []struct {
		name         string
		verification *v1alpha1.Verification
		target       *appsv1.Deployment
		want         *preview.GoldenRequest
		wantNeeds    []string
	}{
		{name: "none", wantNeeds: nil},
		{name: "a value and two keys of one Secret and one of another",
			verification: verification(
				v1alpha1.VerificationHeader{Name: "X-Source", Value: ptr.To("secret-looking value")},
				v1alpha1.VerificationHeader{Name: "Authorization", ValueFrom: secret("token", "bearer")},
				v1alpha1.VerificationHeader{Name: "X-Tenant", ValueFrom: secret("token", "tenant")},
				v1alpha1.VerificationHeader{Name: "X-Key", ValueFrom: secret("api-key", "key")}),
			want: &preview.GoldenRequest{Method: "POST", Port: "http", Path: "/pii/extract", BodyBytes: len(body),
				Headers: []preview.GoldenHeader{{Name: "X-Source"}, {Name: "Authorization", Secret: "token", Key: "bearer"},
					{Name: "X-Tenant", Secret: "token", Key: "tenant"}, {Name: "X-Key", Secret: "api-key", Key: "key"}},
				TimeoutSeconds: v1alpha1.DefaultVerificationTimeout, Attempts: v1alpha1.DefaultVerificationAttempts,
				IntervalSeconds: v1alpha1.DefaultVerificationInterval, SuccessCondition: "response.code == 200"},
			wantNeeds: []string{"patch pods/status", "get secrets named token", "get secrets named api-key"}},
		{name: "declared no more, the target's pods still gated", target: gated, wantNeeds: []string{"patch pods/status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := model("v1")
			m.Spec.Verification = tt.verification
			res := preview.Model(preview.Committed(m, nil), rollout.Observed{Deployment: tt.target, Now: metav1.Now()}, rollout.Options{})
			if !apiequality.Semantic.DeepEqual(res.Verification, tt.want) {
				t.Errorf("Verification = %+v, want %+v", res.Verification, tt.want)
			}
			var needs []string
			for _, n := range res.Needs() {
				if n.Resource == "pods" || n.Resource == "secrets" {
					needs = append(needs, n.String())
				}
			}
			if strings.Join(needs, ", ") != strings.Join(tt.wantNeeds, ", ") {
				t.Errorf("the verifier's needs = %q, want %q", needs, tt.wantNeeds)
			}
			out, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "secret-looking value") || strings.Contains(string(out), "Patient") {
				t.Errorf("a header's value or the body is in the result: %s", out)
			}
		})
	}
}
