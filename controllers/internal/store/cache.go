package store

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// shardSelector selects the objects the operator wrote (key=value) for the
// models selects: the model's shard labels are carried onto them, so
// models' requirements hold for them as for their model.
func shardSelector(models labels.Selector, key, value string) labels.Selector {
	sel := labels.SelectorFromSet(labels.Set{key: value})
	if models == nil {
		return sel
	}
	reqs, _ := models.Requirements()
	return sel.Add(reqs...)
}

// ServiceAccountMetadata is the cache's key for ServiceAccounts, read by
// metadata only: the reconciler asks whether the ServiceAccount a model's
// writes are made as exists (impersonate.go).
func ServiceAccountMetadata() *metav1.PartialObjectMetadata {
	sa := &metav1.PartialObjectMetadata{}
	sa.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	return sa
}

// PruneServiceAccount is the cache transform for ServiceAccounts: their
// identity and version, nothing else (no labels, annotations or
// managedFields).
func PruneServiceAccount(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Namespace, out.Name, out.UID, out.ResourceVersion = m.Namespace, m.Name, m.UID, m.ResourceVersion
	out.DeletionTimestamp = m.DeletionTimestamp
	return out, nil
}

// PruneDeployment returns a Deployment as the Deployment store keeps it
// (deployments.go): the object's identity,
// resourceVersion, generation, managedFields, the operator's labels and the
// fields the decision core reads (the pod template's readiness gates
// among them). Anything but a *appsv1.Deployment is
// returned as it is.
func PruneDeployment(obj any) (any, error) {
	k, err := keepDeployment(obj, nil, rollout.DefaultFieldManager)
	if kept, ok := k.(*keptDeployment); ok {
		return kept.deployment(), nil
	}
	return k, err
}

// pruneDeployment returns what the Deployment store keeps of d, shard
// being the shard label keys kept beside the operator's labels and manager
// the operator's field manager: the pod template keeps, besides, the
// labels manager set under keys no longer among shard (an earlier sharding
// configuration's, which rollout re-sends until an apply that rolls the
// pods anyway).
func pruneDeployment(d *appsv1.Deployment, shard []string, manager string) *appsv1.Deployment {
	out := &appsv1.Deployment{TypeMeta: deploymentTypeMeta}
	out.Namespace, out.Name, out.UID = intern(d.Namespace), d.Name, d.UID
	out.ResourceVersion, out.Generation = d.ResourceVersion, d.Generation
	out.CreationTimestamp, out.DeletionTimestamp = d.CreationTimestamp, d.DeletionTimestamp
	out.Annotations = operatorKeys(d.Annotations)
	out.Labels = withShardLabels(operatorKeys(d.Labels), d.Labels, shard)
	out.ManagedFields = pruneManagedFields(d.ManagedFields, shard)
	out.Spec.Replicas = d.Spec.Replicas
	out.Spec.Paused = d.Spec.Paused
	out.Spec.ProgressDeadlineSeconds = d.Spec.ProgressDeadlineSeconds
	out.Spec.Strategy = d.Spec.Strategy
	out.Spec.Template.Annotations = operatorKeys(d.Spec.Template.Annotations)
	out.Spec.Template.Labels = withShardLabels(operatorKeys(d.Spec.Template.Labels), d.Spec.Template.Labels, shard)
	out.Spec.Template.Labels = withLabelsOf(out.Spec.Template.Labels, d.Spec.Template.Labels, out.ManagedFields, manager)
	if len(d.Spec.Template.Spec.ReadinessGates) > 0 {
		out.Spec.Template.Spec.ReadinessGates = make([]corev1.PodReadinessGate, len(d.Spec.Template.Spec.ReadinessGates))
		for i, g := range d.Spec.Template.Spec.ReadinessGates {
			out.Spec.Template.Spec.ReadinessGates[i].ConditionType = corev1.PodConditionType(intern(string(g.ConditionType)))
		}
	}
	if n := len(d.Spec.Template.Spec.Containers); n > 0 {
		out.Spec.Template.Spec.Containers = make([]corev1.Container, n)
		for i, c := range d.Spec.Template.Spec.Containers {
			out.Spec.Template.Spec.Containers[i].Name = c.Name
			for _, e := range c.Env {
				if e.Name == v1alpha1.PreloadEnvVar {
					out.Spec.Template.Spec.Containers[i].Env = append(out.Spec.Template.Spec.Containers[i].Env, e)
				}
			}
		}
	}
	out.Status = d.Status
	out.Status.Conditions = append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...)
	for i := range out.Status.Conditions {
		// Decisions read a condition's type, status, reason and update
		// time; the message names a ReplicaSet and is not kept, but for
		// a ReplicaFailure's: the API server's answer to a refused pod (a
		// quota, a webhook), which the model's status names, bounded.
		c := &out.Status.Conditions[i]
		msg := ""
		if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			msg = rollout.Shorten(c.Message, rollout.MaxRefusalMessage)
		}
		c.Type, c.Reason, c.Message = appsv1.DeploymentConditionType(intern(string(c.Type))), intern(c.Reason), msg
		c.Status = corev1.ConditionStatus(intern(string(c.Status)))
	}
	return out
}

// withShardLabels adds to kept the shard label keys shard that labels has,
// their values stored once.
func withShardLabels(kept, labels map[string]string, shard []string) map[string]string {
	for _, k := range shard {
		if v, ok := labels[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = intern(v)
		}
	}
	return kept
}

// PruneModel is the cache transform for OpenMedModels (see CacheByObject).
func PruneModel(obj any) (any, error) {
	m, ok := obj.(*v1alpha1.OpenMedModel)
	if !ok {
		return obj, nil
	}
	m.ManagedFields = nil
	if _, ok := m.Annotations[lastApplied]; ok {
		delete(m.Annotations, lastApplied)
	}
	// Every string and pointer the cache keeps is an object the collector
	// visits at each cycle: the few values most models share (a namespace,
	// the finalizer, a tier, a strategy, small numbers) are kept once.
	m.Namespace = intern(m.Namespace)
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern(f)
	}
	sp := &m.Spec
	sp.Tier = v1alpha1.Tier(intern(string(sp.Tier)))
	sp.Replicas, sp.RevisionHistoryLimit = sharedInt32(sp.Replicas), sharedInt32(sp.RevisionHistoryLimit)
	rs := &sp.RolloutStrategy
	rs.Type, rs.WhenUnschedulable = v1alpha1.RolloutStrategyType(intern(string(rs.Type))), v1alpha1.UnschedulableAction(intern(string(rs.WhenUnschedulable)))
	rs.MaxUnavailable, rs.MaxSurge = sharedIntOrString(rs.MaxUnavailable), sharedIntOrString(rs.MaxSurge)
	rs.RollbackOnFailure = sharedBool(rs.RollbackOnFailure)
	rs.ProgressDeadlineSeconds, rs.BakeSeconds = sharedInt32(rs.ProgressDeadlineSeconds), sharedInt32(rs.BakeSeconds)
	rs.UnschedulableSeconds, rs.MinAvailable = sharedInt32(rs.UnschedulableSeconds), sharedInt32(rs.MinAvailable)
	for i := range m.Status.Conditions {
		c := &m.Status.Conditions[i]
		c.Type, c.Reason, c.Message = intern(c.Type), intern(c.Reason), intern(c.Message)
		c.Status = metav1.ConditionStatus(intern(string(c.Status)))
	}
	st := &m.Status
	st.Phase = v1alpha1.Phase(intern(string(st.Phase)))
	// A status repeats its versions and hashes (desired, applied, active,
	// each history entry and its spec views): one copy each.
	for _, p := range []*string{&m.Spec.Version, &m.Spec.Family, &st.DesiredVersion, &st.ActiveVersion,
		&st.DesiredSpecHash, &st.AppliedSpecHash, &st.FailedSpecHash, &st.ManifestHash, &st.ManifestConfigMapName, &st.TargetName} {
		*p = intern(*p)
	}
	for i := range st.History {
		h := &st.History[i]
		h.Version, h.SpecHash, h.ManifestHash = intern(h.Version), intern(h.SpecHash), intern(h.ManifestHash)
		internSpec(&h.Spec)
	}
	for _, n := range []**v1alpha1.NormalizedSpec{&st.LastSuccessfulSpec, &st.PreviousSuccessfulSpec, &st.RollbackSpec} {
		if *n == nil {
			continue
		}
		internSpec(*n)
		// The last and previous successful specs (and a rollback's) are
		// mostly those of history entries: they share the entry's copy.
		// A cached object is only ever read (what the cache's Get and List
		// hand out is a deep copy, with copies of its own).
		for i := range st.History {
			if equality.Semantic.DeepEqual(**n, st.History[i].Spec) {
				*n = &st.History[i].Spec
				break
			}
		}
	}
	return m, nil
}

func internSpec(n *v1alpha1.NormalizedSpec) {
	n.Family, n.Version, n.ManifestConfigMapName = intern(n.Family), intern(n.Version), intern(n.ManifestConfigMapName)
	n.TargetRef.Name, n.TargetRef.ContainerName = intern(n.TargetRef.Name), intern(n.TargetRef.ContainerName)
	n.Tier, n.Replicas = v1alpha1.Tier(intern(string(n.Tier))), sharedInt32(n.Replicas)
	rs := &n.RolloutStrategy
	rs.Type, rs.WhenUnschedulable = v1alpha1.RolloutStrategyType(intern(string(rs.Type))), v1alpha1.UnschedulableAction(intern(string(rs.WhenUnschedulable)))
	rs.MaxUnavailable, rs.MaxSurge = internIntOrString(rs.MaxUnavailable), internIntOrString(rs.MaxSurge)
	rs.UnschedulableSeconds, rs.MinAvailable = sharedInt32(rs.UnschedulableSeconds), sharedInt32(rs.MinAvailable)
}

// sharedInt32s are the small numbers cached objects point to (replicas,
// limits, seconds): a pointer into this array is not an object of the
// heap. What the cache holds is only ever read (its Get and List hand out
// deep copies), as for interned strings.
var sharedInt32s = func() (a [1024]int32) {
	for i := range a {
		a[i] = int32(i)
	}
	return a
}()

// sharedInt32 returns a pointer to the shared copy of *p when there is one,
// else p.
func sharedInt32(p *int32) *int32 {
	if p == nil || *p < 0 || int(*p) >= len(sharedInt32s) {
		return p
	}
	return &sharedInt32s[*p]
}

// sharedIntOrStrings are the small integer int-or-strings, as sharedInt32s.
var sharedIntOrStrings = func() (a [128]intstr.IntOrString) {
	for i := range a {
		a[i] = intstr.FromInt32(int32(i))
	}
	return a
}()

// sharedIntOrString returns a pointer to the shared copy of *p (a small
// integer), p with its string interned, or nil.
func sharedIntOrString(p *intstr.IntOrString) *intstr.IntOrString {
	switch {
	case p == nil:
		return nil
	case p.Type == intstr.Int && p.IntVal >= 0 && int(p.IntVal) < len(sharedIntOrStrings):
		return &sharedIntOrStrings[p.IntVal]
	case p.Type == intstr.String:
		*p = internIntOrString(*p)
	}
	return p
}

// lastApplied is kubectl's (and Argo CD's) client-side apply record.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// intern returns the one copy of s kept for all cached objects: condition
// texts are fixed strings every resource repeats.
func intern(s string) string { return unique.Make(s).Value() }

// Intern is intern for the reconciler's own memory (its metrics' labels).
func Intern(s string) string { return intern(s) }

// PruneConfigMap returns a ConfigMap as the ConfigMap store keeps it
// (configmaps.go): its identity, resourceVersion, creation and deletion
// times and its controller reference to an OpenMedModel, no data (and, in a
// shard, its shard labels). Anything but a *corev1.ConfigMap or a
// ConfigMap's *metav1.PartialObjectMetadata is returned as it is.
func PruneConfigMap(obj any) (any, error) {
	k, err := keepConfigMap(obj, nil)
	if kept, ok := k.(*keptConfigMap); ok {
		return kept.configMap(), nil
	}
	return k, err
}

// labelSets holds one map for each distinct set of shard labels cached
// objects carry, by its canonical form: a shard has a few such sets,
// whatever the number of objects. The maps are only read.
var labelSets sync.Map

// sharedLabels returns labels' values of keys as the one map kept for that
// set; nil when labels has none of keys.
func sharedLabels(labels map[string]string, keys []string) map[string]string {
	var b strings.Builder
	var m map[string]string
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(v)
			b.WriteByte(0)
		}
	}
	if m == nil {
		return nil
	}
	kept, _ := labelSets.LoadOrStore(b.String(), m)
	return kept.(map[string]string)
}

// withLabelsOf adds to kept the labels of labels that the pruned
// managedFields entries of manager name ("f:<key>", as rollout's
// valueSetters looks for them before it parses; the pod template's labels the
// operator set under a shard label key it no longer has, see
// pruneManagedFields), their values stored once. A key that only looks
// like one there (a label named as a field the entry also owns) is kept
// too: the decision core tells them apart by parsing the entry.
func withLabelsOf(kept, labels map[string]string, entries []metav1.ManagedFieldsEntry, manager string) map[string]string {
	if manager == "" {
		return kept
	}
	for k, v := range labels {
		if _, ok := kept[k]; ok {
			continue
		}
		for _, e := range entries {
			if e.Manager == manager && e.FieldsV1 != nil && bytes.Contains(e.FieldsV1.Raw, []byte(`"f:`+k+`"`)) {
				if kept == nil {
					kept = map[string]string{}
				}
				kept[intern(k)] = intern(v)
				break
			}
		}
	}
	return kept
}

// pruneManagedFields keeps, of each managedFields entry, the fields drift
// attribution and the release read: the operator's annotations, replicas,
// strategy, progress deadline, the pod template's operator annotations and
// each container's preload env entry. Entries of the scale subresource are
// kept too (an HPA or `kubectl scale` owns spec.replicas through it), so a
// correction of replicas names them. Status entries are dropped. An entry
// left with no such field is kept with an empty field set, so the cache
// still shows every manager that has one (the operator's own entry is what
// tells a finished release from an interrupted one). The time of an apply
// entry is kept, of the others dropped. Every label of the pod template is
// kept, whatever its key: the operator's own under a shard label key it no
// longer has are its to keep until an apply that rolls the pods anyway,
// and another manager's there say whether it set them too.
func pruneManagedFields(entries []metav1.ManagedFieldsEntry, shard []string) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if e.Subresource == "status" || e.FieldsV1 == nil {
			continue
		}
		e.Manager, e.APIVersion, e.Subresource = intern(e.Manager), intern(e.APIVersion), intern(e.Subresource)
		if e.Operation != metav1.ManagedFieldsOperationApply {
			// The time of an apply is kept: the operator's own says when
			// it last wrote the Deployment (a ReplicaFailure older than
			// that is not its rollout's).
			e.Time = nil
		}
		if raw, ok := prunedSets.get(shard, e.FieldsV1.Raw); ok {
			e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
			out = append(out, e)
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			out = append(out, e)
			continue
		}
		kept := fieldpath.NewSet()
		set.Iterate(func(p fieldpath.Path) {
			if attributes(p, shard) {
				kept.Insert(p)
			}
		})
		if kept.Empty() {
			prunedSets.put(shard, e.FieldsV1.Raw, emptyFields)
			e.FieldsV1 = &metav1.FieldsV1{Raw: emptyFields}
			out = append(out, e)
			continue
		}
		raw, err := kept.ToJSON()
		if err != nil {
			out = append(out, e)
			continue
		}
		// ToJSON's buffer has room to grow (up to twice the bytes): the
		// cache keeps an exact copy.
		raw = bytes.Clone(raw)
		prunedSets.put(shard, e.FieldsV1.Raw, raw)
		e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
		out = append(out, e)
	}
	return out
}

// prunedSets remembers what pruneManagedFields made of a field set, by the
// set's JSON and the shard label keys: the entries of one manager on the
// Deployments of one chart have the same set, and an event of the
// Deployment controller leaves the spec's entries as they were, so nearly
// every event prunes a set pruned before (parsing and pruning it was 6 % of
// what the operator allocated). A remembered set is shared by whoever gets
// it, read-only. It holds up to maxPrunedSetBytes of sets, then starts
// over.
var prunedSets prunedSetMemo

const maxPrunedSetBytes = 1 << 20

type prunedSetMemo struct {
	mu sync.Mutex
	// byShard holds, per shard label keys (joined by NUL), the pruned set
	// of each set's JSON.
	byShard map[string]map[string][]byte
	bytes   int
}

func (m *prunedSetMemo) get(shard []string, raw []byte) ([]byte, bool) {
	key := strings.Join(shard, "\x00")
	m.mu.Lock()
	defer m.mu.Unlock()
	pruned, ok := m.byShard[key][string(raw)]
	return pruned, ok
}

func (m *prunedSetMemo) put(shard []string, raw, pruned []byte) {
	key := strings.Join(shard, "\x00")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byShard == nil || m.bytes+len(raw)+len(pruned) > maxPrunedSetBytes {
		m.byShard, m.bytes = map[string]map[string][]byte{}, 0
	}
	if m.byShard[key] == nil {
		m.byShard[key] = map[string][]byte{}
	}
	m.byShard[key][string(raw)] = pruned
	m.bytes += len(raw) + len(pruned)
}

// emptyFields is the field set of an entry that owns nothing a decision
// reads.
var emptyFields = []byte("{}")

// attributes reports whether a managedFields path is one a decision reads;
// shard are the shard label keys.
func attributes(p fieldpath.Path, shard []string) bool {
	name := func(i int) string {
		if i < len(p) && p[i].FieldName != nil {
			return *p[i].FieldName
		}
		return ""
	}
	switch {
	case name(0) == "metadata":
		return len(p) < 3 || ((name(1) == "annotations" || name(1) == "labels") && strings.HasPrefix(name(2), "openmed.ai/")) ||
			(name(1) == "labels" && slices.Contains(shard, name(2)))
	case name(0) != "spec":
		return false
	case len(p) == 1:
		return true
	}
	switch name(1) {
	case "replicas", "progressDeadlineSeconds", "strategy":
		return true
	case "template":
	default:
		return false
	}
	switch {
	case len(p) < 4:
		return true
	case name(2) == "metadata":
		// Every label of the template: whoever set it under a shard
		// label key, the current one or an earlier one, says who owns it.
		return name(3) == "labels" || name(3) == "annotations" && (len(p) < 5 || strings.HasPrefix(name(4), "openmed.ai/"))
	case name(2) == "spec" && name(3) == "readinessGates":
		// An atomic list: who set it says who owns the operator's gate.
		return true
	case name(2) != "spec" || name(3) != "containers":
		return false
	case len(p) < 7:
		// The containers list, one container, or a field of it.
		return len(p) < 6 || name(5) == "name" || name(5) == "env"
	}
	// containers[name=x].env[name=y]...: only the preload entry.
	key := p[6].Key
	if name(5) != "env" || key == nil {
		return false
	}
	for _, f := range *key {
		if f.Name == "name" && f.Value.AsString() == v1alpha1.PreloadEnvVar {
			return true
		}
	}
	return false
}

// operatorKeys keeps of a Deployment's (or its pod template's) labels or
// annotations the operator's own keys (operatorKeyValues), their keys and
// values stored once for all cached objects (a manifest hash is the one the
// model's status holds). Whoever may label a Deployment as claimed may
// also give it any other openmed.ai key, or 256 KiB in one of these:
// nothing else is kept, and a value the operator could not have written
// is kept as foreignValue, which a decision reads as somebody else's.
func operatorKeys(in map[string]string) map[string]string {
	var out map[string]string
	for k, valid := range operatorKeyValues {
		v, ok := in[k]
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if !valid(v) {
			v = foreignValue
		}
		// k is the table's own string: no copy per object.
		out[k] = intern(v)
	}
	return out
}

// foreignValue is what the Deployment store keeps of an operator's key
// whose value the operator could not have written (an owner annotation
// that names no model, a manifest hash that is no digest, a label of
// another value): not empty, never equal to a value the operator writes.
const foreignValue = "<foreign>"

// operatorKeyValues are the label and annotation keys of its own the
// operator reads on a Deployment and its pod template, each with the test
// of a value it may have written.
var operatorKeyValues = map[string]func(string) bool{
	v1alpha1.ModelResourceAnnotation: func(v string) bool { _, _, ok := rollout.ParseOwnerKey(v); return ok },
	v1alpha1.ManifestHashAnnotation:  rollout.IsDigest,
	v1alpha1.ClaimedLabel:            func(v string) bool { return v == "true" },
	v1alpha1.BakeLabel:               func(v string) bool { return v == "true" },
}
