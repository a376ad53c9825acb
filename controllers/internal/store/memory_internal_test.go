package store

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/json"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// cachedObjects is how many objects of a kind TestCachedBytes holds at once:
// enough that a map's or an interned string's share is what it is at scale.
const cachedObjects = 4000

// TestCachedBytes measures what one model costs in the operator's caches,
// kind by kind: objects as the API server serves them in the scale
// benchmark (testdata/memory, captured from its API server: a model Ready
// with its first version and the bake guard on, its claimed Deployment, a
// manifest ConfigMap and a pod of the baking version), each made distinct
// by its name and uids, decoded, kept by its store's transform and added to
// a client-go store with the indexes the operator's informer of that kind
// has (and, for ConfigMaps and pods, held by owner as their store's handler
// holds them). Go's heap in use before and after, after a collection, in
// bytes and in objects, is the cost; both must stay within the kind's
// budgets.
func TestCachedBytes(t *testing.T) {
	for _, tc := range []struct {
		kind, file string
		new        func() client.Object
		transform  toolscache.TransformFunc
		indexers   toolscache.Indexers
		// hold, when set, returns what holds a kept object by its owner
		// beside the store (ownerMap), as the store's handler does.
		hold func() func(any)
		// perModel is the number of objects of the kind a model has in
		// the benchmark's end state.
		perModel int
		// budget is the most bytes an object may cost: about 10 % above
		// what it cost when the store took its shape (Go 1.27), so a
		// change that makes the kept shape larger fails here first.
		budget int
		// objects is the most heap objects an object may cost, the
		// store's share included: the collector visits each at every
		// cycle, so at 10,000 models their number, more than their
		// bytes, is its work (docs/scale.md). About 10 % above what
		// the shapes cost when the budget was set.
		objects float64
	}{
		{kind: "OpenMedModel", file: "model.json", new: func() client.Object { return &v1alpha1.OpenMedModel{} }, transform: PruneModel,
			indexers: toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc, fieldIndexName(TargetIndexKey): IndexModelsByTarget},
			perModel: 1, budget: 2900, objects: 20},
		{kind: "Deployment", file: "deployment.json", new: func() client.Object { return &appsv1.Deployment{} },
			transform: func(obj any) (any, error) { return keepDeployment(obj, nil, rollout.DefaultFieldManager) }, perModel: 1, budget: 1900, objects: 18},
		{kind: "ConfigMap", file: "configmap.json", new: func() client.Object { return &corev1.ConfigMap{} },
			transform: func(obj any) (any, error) { return keepConfigMap(obj, nil) },
			hold: func() func(any) {
				s := &ConfigMaps{byOwner: newOwnerMap[ownerKey, *keptConfigMap]()}
				return func(obj any) { s.put(obj.(*keptConfigMap), false) }
			},
			perModel: 2, budget: 700, objects: 10},
		{kind: "Pod", file: "pod.json", new: func() client.Object { return &corev1.Pod{} }, transform: compactPod,
			hold: func() func(any) {
				s := &Pods{byOwner: newOwnerMap[string, keptPod]()}
				return func(obj any) { s.put(obj.(keptPod), false) }
			},
			// The tenth object is the UID of the pod's ReplicaSet, kept to
			// tell the target's pods from copies (shared by the pods of
			// one ReplicaSet; every pod here has its own).
			perModel: 2, budget: 650, objects: 10},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "memory", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			first := tc.new()
			if err := json.UnmarshalCaseSensitivePreserveInts(raw, first); err != nil {
				t.Fatal(err)
			}
			// Each copy gets its own name, uid and owner (the model's
			// name is in the names of everything of the model).
			model := []byte(modelOf(first))
			variants := make([][]byte, cachedObjects)
			for i := range variants {
				v := bytes.ReplaceAll(raw, model, fmt.Appendf(nil, "m%0*d", len(model)-1, i))
				variants[i] = uuid.ReplaceAllFunc(v, func(u []byte) []byte { return append(fmt.Appendf(nil, "\"%08x", i), u[9:]...) })
			}
			store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, tc.indexers)
			hold := func(any) {}
			if tc.hold != nil {
				hold = tc.hold()
			}
			before, beforeObjects := liveHeap()
			for _, v := range variants {
				obj := tc.new()
				if err := json.UnmarshalCaseSensitivePreserveInts(v, obj); err != nil {
					t.Fatal(err)
				}
				kept, err := tc.transform(obj)
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Add(kept); err != nil {
					t.Fatal(err)
				}
				hold(kept)
			}
			after, afterObjects := liveHeap()
			per := (int(after) - int(before)) / cachedObjects
			objects := float64(int(afterObjects)-int(beforeObjects)) / cachedObjects
			t.Logf("%s: %.1f heap objects each", tc.kind, objects)
			if objects > tc.objects {
				t.Errorf("%s: %.1f heap objects each, more than %.0f", tc.kind, objects, tc.objects)
			}
			runtime.KeepAlive(store)
			runtime.KeepAlive(hold)
			runtime.KeepAlive(variants)
			t.Logf("%s: %d bytes each, %d per model", tc.kind, per, per*tc.perModel)
			if per > tc.budget {
				t.Errorf("%s: %d bytes each, more than %d", tc.kind, per, tc.budget)
			}
		})
	}
}

// uuid matches a quoted uid (its first group is replaced per copy).
var uuid = regexp.MustCompile(`"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// modelOf returns the name of the model obj belongs to: its own, or the
// one its name starts with.
func modelOf(obj client.Object) string {
	name := obj.GetName()
	if len(name) >= len("model-00000") {
		return name[:len("model-00000")]
	}
	return name
}

// liveHeap returns the bytes and the number of live heap objects after a
// collection.
func liveHeap() (bytes, objects uint64) {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapObjects
}

// TestKeptConfigMap: the ConfigMap store keeps of a ConfigMap what
// PruneConfigMap documents — identity, version, times, its controller
// reference to an OpenMedModel, the shard labels —, no data and no other
// owner reference, whatever the ConfigMap carries (1 MiB of data, a
// hundred owner references); each read is a copy of its own.
func TestKeptConfigMap(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "memory", "configmap.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		shard  []string
		labels map[string]string
		edit   func(*corev1.ConfigMap)
	}{
		{name: "a manifest"},
		{name: "a manifest in a shard", shard: []string{"sharding.fluxcd.io/key"}, labels: map[string]string{"sharding.fluxcd.io/key": "shard1"}},
		{name: "not immutable, 1 MiB of data", edit: func(cm *corev1.ConfigMap) {
			cm.Immutable = nil
			cm.Data = map[string]string{"x": strings.Repeat("x", 1<<20)}
		}},
		{name: "a hundred more owner references", edit: func(cm *corev1.ConfigMap) {
			for i := range 100 {
				cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: fmt.Sprint("p", i), UID: types.UID(fmt.Sprint("u", i))})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := &corev1.ConfigMap{}
			if err := json.UnmarshalCaseSensitivePreserveInts(raw, sent); err != nil {
				t.Fatal(err)
			}
			want := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
			want.Namespace, want.Name, want.UID, want.ResourceVersion = sent.Namespace, sent.Name, sent.UID, sent.ResourceVersion
			want.CreationTimestamp, want.OwnerReferences, want.Labels = sent.CreationTimestamp, slices.Clone(sent.OwnerReferences), tc.labels
			for k, v := range tc.labels {
				sent.Labels[k] = v
			}
			if tc.edit != nil {
				tc.edit(sent)
			}
			// As the store's watch delivers it: metadata only.
			meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: *sent.ObjectMeta.DeepCopy()}
			kept, err := keepConfigMap(meta, tc.shard)
			if err != nil {
				t.Fatal(err)
			}
			got := kept.(*keptConfigMap).configMap()
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("the store hands out\n%+v\nwant\n%+v", got, want)
			}
			got.OwnerReferences[0].Name, got.Labels = "changed", map[string]string{"x": "y"}
			if again := kept.(*keptConfigMap).configMap(); again.OwnerReferences[0].Name == "changed" || again.Labels["x"] == "y" {
				t.Error("a change to what the store handed out changed what it keeps")
			}
		})
	}
}

// decodeCaptured decodes the object captured from the scale benchmark in
// testdata/memory/file into obj.
func decodeCaptured(t *testing.T, file string, obj any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "memory", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		t.Fatal(err)
	}
}

// TestKeptDeploymentBounded: whoever may label a Deployment as claimed
// decides what the Deployment store receives: 200 KiB in the operator's
// owner annotation, in its manifest-hash annotation, in any other
// openmed.ai annotation, and a literal preload value of 200 KiB. The store
// keeps the operator's keys only, a value it could not have written as
// foreignValue (a foreign owner, as before), and a digest of the literal;
// what it holds stays within TestCachedBytes' budget of a Deployment.
func TestKeptDeploymentBounded(t *testing.T) {
	big := strings.Repeat("x", 200*1024)
	d := &appsv1.Deployment{}
	decodeCaptured(t, "deployment.json", d)
	d.Annotations[v1alpha1.ModelResourceAnnotation] = "models/" + big
	d.Annotations["openmed.ai/anything"] = big
	d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] = big
	d.Spec.Template.Annotations["openmed.ai/else"] = big
	d.Spec.Template.Labels[v1alpha1.BakeLabel] = "maybe"
	for i := range d.Spec.Template.Spec.Containers[0].Env {
		if e := &d.Spec.Template.Spec.Containers[0].Env[i]; e.Name == v1alpha1.PreloadEnvVar {
			e.Value, e.ValueFrom = big, nil
		}
	}
	kept, err := keepDeployment(d, nil, rollout.DefaultFieldManager)
	if err != nil {
		t.Fatal(err)
	}
	k := kept.(*keptDeployment)
	got := k.deployment()
	want := map[string]string{v1alpha1.ModelResourceAnnotation: foreignValue}
	if !maps.Equal(got.Annotations, want) {
		t.Errorf("annotations kept: %v, want %v", keys(got.Annotations), want)
	}
	if a := got.Spec.Template.Annotations; len(a) != 2 || a[v1alpha1.ManifestHashAnnotation] != foreignValue {
		t.Errorf("template annotations kept: %v", keys(a))
	}
	if got.Spec.Template.Labels[v1alpha1.BakeLabel] != foreignValue {
		t.Errorf("bake label kept as %q", got.Spec.Template.Labels[v1alpha1.BakeLabel])
	}
	for _, e := range got.Spec.Template.Spec.Containers[0].Env {
		if e.Name == v1alpha1.PreloadEnvVar && (len(e.Value) > maxKeptEnvValue || e.Value == "") {
			t.Errorf("the literal preload value kept with %d bytes", len(e.Value))
		}
	}
	size := 0
	for _, s := range append(append(append(k.labels, k.annotations...), k.templateLabels...), k.templateAnnotations...) {
		size += len(s)
	}
	if size > 1024 {
		t.Errorf("the kept labels and annotations hold %d bytes", size)
	}
}

// keys returns m's keys with the length of each value.
func keys(m map[string]string) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}
