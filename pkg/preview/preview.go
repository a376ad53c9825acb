// Package preview answers the question a reviewer of a GitOps pull request
// asks: what will this commit do to the cluster? It runs the operator's own
// decision core (rollout.Decide) on the spec from Git against the live
// resource and its observed target, and describes the passes the operator
// would make until it acts: the phase and conditions it reaches, the
// ConfigMaps it creates, the drift it corrects and whose, and what a failed
// rollout would roll back to.
//
// It is pure like the core: the caller reads the cluster (or files) and, for
// the Deployment, computes the object after the operator's apply (kubectl
// openmed plan asks the API server for it with a server-side dry-run apply);
// Diff then lists the changed fields with the field managers that own them
// now.
package preview

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// maxPasses bounds the passes Model simulates: a pass that only records a
// decision (a rollback, Plan.Requeue) is followed by the pass that acts on
// it; the core never needs more than two for one commit.
const maxPasses = 3

// Committed returns the object the operator will read once the committed
// file is applied: the live object's metadata and status (nil live: a new
// object, generation 1), the file's spec (defaulted as the API server does)
// and the file's annotations over the live ones, without the live
// annotations the file's applier removes (see Annotations). The generation
// moves on when the spec changes, as the API server does for a custom
// resource with a status subresource.
func Committed(file, live *v1alpha1.OpenMedModel) *v1alpha1.OpenMedModel {
	obj, _ := CommittedWith(file, live)
	return obj
}

// CommittedWith is Committed and what becomes of each live annotation the
// file does not have.
func CommittedWith(file, live *v1alpha1.OpenMedModel) (*v1alpha1.OpenMedModel, []AnnotationChange) {
	spec := file.Spec.DeepCopy()
	spec.Default()
	if live == nil {
		obj := file.DeepCopy()
		obj.Spec = *spec
		obj.Generation = 1
		obj.Status = v1alpha1.OpenMedModelStatus{}
		return obj, nil
	}
	obj := live.DeepCopy()
	if !apiequality.Semantic.DeepEqual(live.Spec, *spec) {
		obj.Generation = live.Generation + 1
	}
	obj.Spec = *spec
	changes := Annotations(file, live)
	for _, c := range changes {
		if c.Removed {
			delete(obj.Annotations, c.Key)
		}
	}
	for k, v := range file.Annotations {
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[k] = v
	}
	return obj, changes
}

// AnnotationChange is what applying the file does to a live annotation it
// does not carry.
type AnnotationChange struct {
	// Key is the annotation.
	Key string `json:"key"`
	// Removed is true when the applier of the file owns the annotation, so
	// applying the file without it removes it.
	Removed bool `json:"removed"`
	// Managers are the field managers that set it (from managedFields); a
	// removed one names the applier.
	Managers []string `json:"managers,omitempty"`
}

// Annotations says, for each live annotation of the operator's
// (openmed.ai/ and reconcile.fluxcd.io/) that the file does not carry,
// whether applying the file removes it. Who applies the file is read from
// the live object: the appliers are the field managers that own
// spec.version with server-side apply (Flux's kustomize-controller, Argo
// CD with ServerSideApply, kubectl apply --server-side); such an applier
// removes an annotation it owns. A client-side apply (kubectl apply, Argo
// CD's default) removes an annotation its last-applied-configuration
// holds. Any other annotation (kubectl annotate, an Argo CD action) stays:
// nothing in Git owns it.
func Annotations(file, live *v1alpha1.OpenMedModel) []AnnotationChange {
	if live == nil {
		return nil
	}
	appliers := map[string]bool{}
	owners := map[string][]string{}
	version := fieldpath.MakePathOrDie("spec", "version")
	for _, e := range live.ManagedFields {
		set := &fieldpath.Set{}
		if e.FieldsV1 == nil || set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)) != nil {
			continue
		}
		if e.Operation == metav1.ManagedFieldsOperationApply && set.Has(version) {
			appliers[e.Manager] = true
		}
		for k := range live.Annotations {
			if set.Has(fieldpath.MakePathOrDie("metadata", "annotations", k)) {
				owners[k] = append(owners[k], e.Manager)
			}
		}
	}
	lastApplied := map[string]any{}
	if raw := live.Annotations[lastAppliedAnnotation]; raw != "" {
		var prev struct {
			Metadata struct {
				Annotations map[string]any `json:"annotations"`
			} `json:"metadata"`
		}
		if json.Unmarshal([]byte(raw), &prev) == nil {
			lastApplied = prev.Metadata.Annotations
		}
	}
	var out []AnnotationChange
	for k := range live.Annotations {
		if _, inFile := file.Annotations[k]; inFile || !operatorAnnotation(k) {
			continue
		}
		c := AnnotationChange{Key: k, Managers: owners[k]}
		_, c.Removed = lastApplied[k]
		for _, m := range owners[k] {
			c.Removed = c.Removed || appliers[m]
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// lastAppliedAnnotation is kubectl's (and Argo CD's) client-side apply
// record.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// operatorAnnotation reports an annotation the operator reads.
func operatorAnnotation(k string) bool {
	return strings.HasPrefix(k, "openmed.ai/") || strings.HasPrefix(k, "reconcile.fluxcd.io/")
}

// Result describes what the operator will do with a committed spec.
type Result struct {
	// Namespace and Name identify the OpenMedModel.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// New is true when the OpenMedModel does not exist yet.
	New bool `json:"new"`
	// Generation is the generation the operator will see, and SpecChanged
	// whether it differs from the live one.
	Generation  int64 `json:"generation"`
	SpecChanged bool  `json:"specChanged"`
	// Phase, Message and Conditions are what the status says after the
	// acting pass (Message is the Reconciling or Stalled message).
	Phase      v1alpha1.Phase     `json:"phase,omitempty"`
	Message    string             `json:"message,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Passes is the number of passes until the operator acts (1 or 2).
	Passes int `json:"passes"`
	// Target is the Deployment the pointer is applied to, "" when none.
	Target string `json:"target,omitempty"`
	// CreateConfigMaps are the manifest ConfigMaps the operator creates.
	CreateConfigMaps []string `json:"createConfigMaps,omitempty"`
	// PruneConfigMaps are the owned manifest ConfigMaps it deletes.
	PruneConfigMaps []string `json:"pruneConfigMaps,omitempty"`
	// Deployment lists the Deployment fields that change (set by the
	// caller from Diff).
	Deployment []FieldChange `json:"deployment,omitempty"`
	// PodsRoll is true when the pod template changes, so the Deployment
	// controller replaces the pods (set by the caller with Deployment).
	PodsRoll bool `json:"podsRoll"`
	// Drift is the drift the apply corrects, with the managers that made it.
	Drift []rollout.Drift `json:"drift,omitempty"`
	// Release names the Deployments whose pointer is given back, sorted.
	Release []string `json:"release,omitempty"`
	// ReleaseReplicas is true when the spec stopped setting replicas: the
	// operator stops owning spec.replicas and leaves the live value to the
	// Deployment's other managers (an HPA, the chart).
	ReleaseReplicas bool `json:"releaseReplicas,omitempty"`
	// Annotations says what applying the file does to the live
	// annotations of the operator's that the file does not carry.
	Annotations []AnnotationChange `json:"annotations,omitempty"`
	// Bake says how long the version this commit rolls out bakes after its
	// rollout completed and what fails the bake ("" when it does not bake).
	Bake string `json:"bake,omitempty"`
	// OnFailure says what happens when the rollout this commit starts
	// exceeds its progress deadline.
	OnFailure string `json:"onFailure,omitempty"`
	// Capacity says what the rollout this commit starts needs beyond what
	// the model's pods hold: the surge pods (maxSurge) with the requests
	// of the target's pod template and the DRA devices of each claim it
	// makes from a ResourceClaimTemplate (see ClaimTemplate; "" when it
	// starts none or the pods request nothing and claim no new device).
	// With scarce GPUs a surge pod waits for one.
	Capacity string `json:"capacity,omitempty"`
	// WritesAs is the ServiceAccount, as namespace/name, the operator makes
	// the writes for the model as (spec.serviceAccountName); "" when it
	// writes with its own rights or its --default-service-account.
	WritesAs string `json:"writesAs,omitempty"`
	// Access says whether WritesAs may make the writes (Needs), as the API
	// server's authorizer answered the caller's SubjectAccessReviews, or
	// why that was not checked (set by the caller).
	Access string `json:"access,omitempty"`
	// Verification is the golden request the model declares
	// (spec.verification), without a header's value or the body; nil when
	// it declares none.
	Verification *GoldenRequest `json:"verification,omitempty"`
	// Events are the reasons of the events the passes record.
	Events []string `json:"events,omitempty"`

	// Apply is the partial Deployment the acting pass applies, nil when it
	// applies none; Takeover precedes it (see rollout.Plan).
	Apply    *unstructured.Unstructured `json:"-"`
	Takeover *unstructured.Unstructured `json:"-"`

	// gated is true when the observed target's pod template carries the
	// operator's readiness gate: its pods get a verdict written, with a
	// golden request or (declared no more) without one.
	gated bool
}

// GoldenRequest is a model's spec.verification as a reviewer needs to see
// it: where the request goes, the names of its headers (never a value; a
// Secret's is named, never read), the size of its body (a synthetic note,
// not shown), how long a pod has and how often it is asked, and the
// condition its answer must meet. The API server's defaults are filled in.
type GoldenRequest struct {
	// Method, Port (a number or a container port's name) and Path are
	// where the request goes, on each pod's IP.
	Method string `json:"method"`
	Port   string `json:"port"`
	Path   string `json:"path"`
	// Headers are the request's headers, by name, in the spec's order.
	Headers []GoldenHeader `json:"headers,omitempty"`
	// BodyBytes is the size of the request's body.
	BodyBytes int `json:"bodyBytes"`
	// TimeoutSeconds bounds one attempt; Attempts is how many a pod has.
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	Attempts       int32 `json:"attempts"`
	// IntervalSeconds is how often each pod of a baking version is asked
	// again, and a serving version's pod that failed.
	IntervalSeconds int32 `json:"intervalSeconds"`
	// SuccessCondition is the CEL expression the answer must satisfy.
	SuccessCondition string `json:"successCondition"`
}

// GoldenHeader is one header of a GoldenRequest: its name and, when its
// value comes from a Secret key of the model's namespace, the Secret and
// the key (the operator reads it as the identity its writes are made as,
// when it sends the request).
type GoldenHeader struct {
	Name   string `json:"name"`
	Secret string `json:"secret,omitempty"`
	Key    string `json:"key,omitempty"`
}

// goldenRequest describes v, defaulted.
func goldenRequest(v *v1alpha1.Verification) *GoldenRequest {
	v = v.DeepCopy()
	v.Default()
	g := &GoldenRequest{
		Method: v.Request.Method, Port: v.Request.Port.String(), Path: v.Request.Path,
		BodyBytes: len(v.Request.Body), TimeoutSeconds: ptr.Deref(v.Request.TimeoutSeconds, 0),
		Attempts: ptr.Deref(v.Attempts, 0), IntervalSeconds: ptr.Deref(v.IntervalSeconds, 0), SuccessCondition: v.SuccessCondition,
	}
	for _, h := range v.Request.Headers {
		gh := GoldenHeader{Name: h.Name}
		if h.ValueFrom != nil {
			gh.Secret, gh.Key = h.ValueFrom.SecretKeyRef.Name, h.ValueFrom.SecretKeyRef.Key
		}
		g.Headers = append(g.Headers, gh)
	}
	return g
}

// Changes reports whether the commit writes to the cluster beyond the
// OpenMedModel's status: a new object, a spec change the operator acts on,
// a ConfigMap, a Deployment field.
func (r *Result) Changes() bool {
	return r.New || len(r.CreateConfigMaps) > 0 || len(r.PruneConfigMaps) > 0 || len(r.Deployment) > 0 || len(r.Release) > 0 || r.ReleaseReplicas
}

// ClaimTemplate is a ResourceClaimTemplate the observed target's pod
// template names (spec.resourceClaims[].resourceClaimTemplateName), as the
// caller read it from the model's namespace. Each pod gets its own
// ResourceClaim from it, so each surge pod needs its devices anew; Model
// counts them in Result.Capacity.
type ClaimTemplate struct {
	// Name is the template's name.
	Name string
	// Template is the template read; nil when it could not be read.
	Template *resourcev1.ResourceClaimTemplate
	// Unreadable says in a few words why the template could not be read
	// ("not found", "you may not get resourceclaimtemplates"), when
	// Template is nil.
	Unreadable string
}

// Model simulates the operator's passes over obj (see Committed) with the
// observed cluster until a pass acts, or nothing more happens, and returns
// what the acting pass does. The Deployment changes are the caller's to
// fill in from Apply (see Diff). templates are the ResourceClaimTemplates
// the observed target's pod template names; one it names and templates
// lacks is said to be not read.
func Model(obj *v1alpha1.OpenMedModel, observed rollout.Observed, opts rollout.Options, templates ...ClaimTemplate) Result {
	res := Result{Namespace: obj.Namespace, Name: obj.Name, Generation: obj.Generation}
	cur := obj.DeepCopy()
	var plan rollout.Plan
	for res.Passes < maxPasses {
		plan = rollout.Decide(cur, observed, opts)
		res.Passes++
		for _, e := range plan.Events {
			res.Events = append(res.Events, e.Reason)
		}
		cur.Status = plan.Status
		if plan.HasChanges() || !plan.Requeue {
			break
		}
	}
	st := plan.Status
	res.Phase = st.Phase
	res.Conditions = st.Conditions
	for _, t := range []string{v1alpha1.StalledCondition, v1alpha1.ReconcilingCondition, v1alpha1.ReadyCondition} {
		if c := apimeta.FindStatusCondition(st.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			res.Message = c.Message
			break
		}
	}
	existing := map[string]bool{}
	for _, cm := range observed.ConfigMaps {
		existing[cm.Name] = true
	}
	for _, cm := range plan.EnsureConfigMaps {
		if !existing[cm.Name] {
			res.CreateConfigMaps = append(res.CreateConfigMaps, cm.Name)
		}
	}
	res.PruneConfigMaps = plan.PruneConfigMaps
	res.Drift = plan.Drift
	res.Apply, res.Takeover = plan.ApplyDeployment, plan.Takeover
	res.ReleaseReplicas = plan.ReleaseReplicas
	if plan.ApplyDeployment != nil {
		res.Target = plan.ApplyDeployment.GetName()
	} else if plan.ReleaseReplicas {
		res.Target = rollout.TargetName(obj)
	}
	for _, rel := range append([]*rollout.Release{plan.Release}, plan.ReleasePrevious...) {
		if rel != nil {
			res.Release = append(res.Release, rel.DeploymentName)
		}
	}
	sort.Strings(res.Release)
	res.OnFailure = onFailure(cur, plan)
	res.Bake = bake(cur, plan)
	res.Capacity = capacity(cur, observed.Deployment, plan, templates)
	if sa := rollout.WritesAs(obj, ""); sa != "" {
		res.WritesAs = obj.Namespace + "/" + sa
	}
	if obj.Spec.Verification != nil {
		res.Verification = goldenRequest(obj.Spec.Verification)
	}
	res.gated = rollout.TemplateGated(observed.Deployment)
	return res
}

// Need is one kind of request the operator makes as the identity the
// model's writes are made as: a verb on a resource (or a subresource of
// it) of the model's namespace, or on one object of it by name.
type Need struct {
	Verb, Group, Resource string
	// Subresource is the subresource written ("status"), "" for none.
	Subresource string
	// Name is the one object the request is for, "" for any.
	Name string
	// Without says what happens when the identity may not, beyond the
	// request's denial; "" when the denial says it all (AccessDenied).
	Without string
}

// String is the need as RBAC spells it: "patch pods/status", "get secrets
// named token".
func (n Need) String() string {
	s := n.Verb + " " + n.Resource
	if n.Subresource != "" {
		s += "/" + n.Subresource
	}
	if n.Name != "" {
		s += " named " + n.Name
	}
	return s
}

// What the verifier cannot do without its rights: a verdict it cannot
// write leaves the pod unready until the rollout's deadline; a header it
// cannot read fails the pod's golden request.
const (
	withoutVerdicts = "no pod's verdict can be written: new pods never become Ready and the rollout fails at its progress deadline"
	withoutSecret   = "the golden request cannot read its header, so every pod fails it and the rollout fails at once"
)

// Needs lists the kinds of write of the result, and, for a model with a
// golden request (or whose target's pods still carry the readiness gate),
// the verifier's: the verdict it writes on each pod (patch pods/status)
// and the Secret of each header that takes its value from one (get, by
// name), both made as the same identity whenever pods roll, not only in
// this commit's pass. They are the rights that identity must hold.
func (r *Result) Needs() []Need {
	var out []Need
	if len(r.CreateConfigMaps) > 0 {
		out = append(out, Need{Verb: "create", Resource: "configmaps"})
	}
	if r.Apply != nil || r.Takeover != nil || len(r.Release) > 0 || r.ReleaseReplicas {
		out = append(out, Need{Verb: "patch", Group: "apps", Resource: "deployments"})
	}
	if len(r.PruneConfigMaps) > 0 {
		out = append(out, Need{Verb: "delete", Resource: "configmaps"})
	}
	if r.Verification != nil || r.gated {
		out = append(out, Need{Verb: "patch", Resource: "pods", Subresource: "status", Without: withoutVerdicts})
	}
	if r.Verification != nil {
		seen := map[string]bool{}
		for _, h := range r.Verification.Headers {
			if h.Secret != "" && !seen[h.Secret] {
				seen[h.Secret] = true
				out = append(out, Need{Verb: "get", Resource: "secrets", Name: h.Secret, Without: withoutSecret})
			}
		}
	}
	return out
}

// capacity describes what the rollout plan starts needs beyond the pods
// the model holds: maxSurge pods (resolved on the replicas, rounded up, as
// the Deployment controller does) with the pod template's requests and
// the DRA devices of its claims (see devices).
func capacity(obj *v1alpha1.OpenMedModel, dep *appsv1.Deployment, plan rollout.Plan, templates []ClaimTemplate) string {
	if plan.Status.Phase != v1alpha1.PhaseRollingOut || plan.ApplyDeployment == nil || dep == nil {
		return ""
	}
	desired, err := rollout.Normalize(obj)
	if err != nil {
		return ""
	}
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	if desired.Replicas != nil {
		replicas = *desired.Replicas
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(&desired.RolloutStrategy.MaxSurge, int(replicas), true)
	if err != nil || surge <= 0 {
		return ""
	}
	requests := corev1.ResourceList{}
	for _, c := range dep.Spec.Template.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := requests[name]
			sum.Add(q)
			requests[name] = sum
		}
		for name, q := range c.Resources.Limits {
			// A limit without a request is the request (the API server
			// defaults it so; a GPU is usually given by its limit alone).
			if _, ok := c.Resources.Requests[name]; !ok {
				sum := requests[name]
				sum.Add(q)
				requests[name] = sum
			}
		}
	}
	claims, newDevices := devices(&dep.Spec.Template.Spec, templates)
	if len(requests) == 0 && !newDevices {
		return ""
	}
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	sort.Strings(names)
	each := make([]string, 0, len(names))
	for _, name := range names {
		q := requests[corev1.ResourceName(name)]
		each = append(each, fmt.Sprintf("%s %s", name, q.String()))
	}
	pods := "pod"
	if surge > 1 {
		pods = "pods"
	}
	then := "until a node has that free, the rollout waits (Ready=False/" + v1alpha1.UnschedulableReason + "; whenUnschedulable: ReplaceInPlace would replace pods in place instead)"
	if rs := desired.RolloutStrategy; rs.WhenUnschedulable == v1alpha1.UnschedulableReplaceInPlace {
		least := rollout.MinAvailable(desired, replicas)
		if replicas-least < 1 {
			then = fmt.Sprintf("until a node has that free, the rollout waits: whenUnschedulable is ReplaceInPlace, but minAvailable %d of %d replicas leaves no pod to replace", least, replicas)
		} else {
			then = fmt.Sprintf("if a new pod stays unschedulable for %ds, the pods are replaced in place (maxSurge 0, maxUnavailable %d, at least %d available) and the declared strategy is restored after",
				ptr.Deref(rs.UnschedulableSeconds, v1alpha1.DefaultUnschedulableSeconds), replicas-least, least)
		}
	}
	what := strings.Join(each, ", ")
	if len(claims) > 0 {
		if what != "" {
			what += " and "
		}
		what += "DRA devices: " + strings.Join(claims, ", ")
	}
	return fmt.Sprintf("%d %s more than its %d replicas while the pods roll (maxSurge %s), each requesting %s; %s",
		surge, pods, replicas, desired.RolloutStrategy.MaxSurge.String(), what, then)
}

// devices describes, in the pod template's order, what each of its
// resourceClaims needs of a new pod: the devices of a claim made from a
// template ("1 of class gpu.nvidia.com (claim gpu from template
// gpu-claim)"), why they are not known when the template was not read,
// and, for a claim all pods share (resourceClaimName), no new device.
// newDevices is true when a claim is made from a template.
func devices(spec *corev1.PodSpec, templates []ClaimTemplate) (claims []string, newDevices bool) {
	read := map[string]ClaimTemplate{}
	for _, t := range templates {
		read[t.Name] = t
	}
	for _, c := range spec.ResourceClaims {
		switch {
		case c.ResourceClaimTemplateName != nil:
			newDevices = true
			name := *c.ResourceClaimTemplateName
			from := fmt.Sprintf("claim %s from template %s", c.Name, name)
			t, ok := read[name]
			switch {
			case !ok:
				claims = append(claims, from+" (not readable: not read)")
			case t.Template == nil:
				claims = append(claims, fmt.Sprintf("%s (not readable: %s)", from, cmp.Or(t.Unreadable, "unknown")))
			default:
				var each []string
				for _, r := range t.Template.Spec.Spec.Devices.Requests {
					each = append(each, deviceRequest(r))
				}
				claims = append(claims, fmt.Sprintf("%s (%s)", cmp.Or(strings.Join(each, " + "), "no device"), from))
			}
		case c.ResourceClaimName != nil:
			claims = append(claims, fmt.Sprintf("no new device (claim %s shares ResourceClaim %s)", c.Name, *c.ResourceClaimName))
		}
	}
	return claims, newDevices
}

// deviceRequest describes one request of a claim: its count and device
// class, all devices of the class on the node (AllocationMode All), or,
// for a request of the first available of several, the first with the
// number of alternatives.
func deviceRequest(r resourcev1.DeviceRequest) string {
	describe := func(class string, mode resourcev1.DeviceAllocationMode, count int64) string {
		if mode == resourcev1.DeviceAllocationModeAll {
			return "all devices of class " + class + " on the node"
		}
		return fmt.Sprintf("%d of class %s", max(count, 1), class)
	}
	switch {
	case r.Exactly != nil:
		return describe(r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count)
	case len(r.FirstAvailable) > 0:
		first := r.FirstAvailable[0]
		s := describe(first.DeviceClassName, first.AllocationMode, first.Count)
		switch n := len(r.FirstAvailable) - 1; n {
		case 0:
			return s
		case 1:
			return s + " or an alternative"
		default:
			return fmt.Sprintf("%s or one of %d alternatives", s, n)
		}
	}
	return "request " + r.Name
}

// onFailure says what the operator does when the rollout the plan starts
// fails: the core's own choice (rollout.AutomaticRollback) on the status
// the acting pass leaves.
// bake describes the bake of the rollout plan starts, or "".
func bake(obj *v1alpha1.OpenMedModel, plan rollout.Plan) string {
	if plan.Status.Phase != v1alpha1.PhaseRollingOut {
		return ""
	}
	desired, err := rollout.Normalize(obj)
	if err != nil || !rollout.Bakes(desired, rollout.ManifestHash(desired), plan.Status.History) {
		return ""
	}
	return fmt.Sprintf("%ds after the rollout completes, before it is Ready and retained; a container restart or OOM kill of its pods, "+
		"or a pod unready for more than %s, fails the rollout", desired.RolloutStrategy.BakeSeconds, rollout.BakeUnreadyGrace)
}

func onFailure(obj *v1alpha1.OpenMedModel, plan rollout.Plan) string {
	st := plan.Status
	if st.Phase != v1alpha1.PhaseRollingOut {
		return ""
	}
	desired, err := rollout.Normalize(obj)
	if err != nil {
		return ""
	}
	r, ok := rollout.AutomaticRollback(desired, st.History)
	switch {
	case ok:
		return fmt.Sprintf("roll back to %s (retained, Ready since %s)", r.Version, st.History[0].ReadyAt.UTC().Format(time.RFC3339))
	case !desired.RolloutStrategy.RollbackOnFailure:
		return "fail: rollbackOnFailure is false; the failed version keeps its pods until the spec changes"
	default:
		return "fail: no retained version to roll back to"
	}
}
