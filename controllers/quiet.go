package controllers

import (
	"context"
	"hash/maphash"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// A rollout in flight is re-evaluated by the backstop timer, which only
// guards against a missed watch event: in a wave of thousands of models, a
// model waits minutes for its Deployment and most of those passes read what
// the pass before them read and decide it again. quiet is what the last
// pass of a model read, when that pass waited on the backstop timer alone,
// wrote nothing and read nothing around the caches: the resourceVersions of
// its inputs, and when the earliest timer of a judgment falls due. A
// backstop pass that finds the caches as that pass read them, before that
// time, would decide the same and write nothing (rollout.Decide is a
// function of its inputs, and every judgment that depends on time passing
// sets a timer of its own): it asks for the next timer and ends. A change
// in the caches that no watch event announced, the backstop's reason to
// be, changes a resourceVersion and gets a whole pass.
type quiet struct {
	// inputs is the digest of what the pass read (inputDigest).
	inputs uint64
	// timerAt is when the pass's earliest judgment timer falls due (zero:
	// none).
	timerAt time.Time
}

// quietPasses holds the quiet of each model whose last pass left one.
type quietPasses struct{ mem *memory }

// take returns and forgets what the last pass of key left.
func (q quietPasses) take(key types.NamespacedName) (x quiet, ok bool) {
	q.mem.read(key, func(m *modelRecord) {
		if m.quiet != nil {
			x, ok = *m.quiet, true
			m.quiet = nil
		}
	})
	return x, ok
}

func (q quietPasses) keep(key types.NamespacedName, x quiet) {
	q.mem.update(key, func(m *modelRecord) { m.quiet = &x })
}

// inputSeed seeds inputDigest for the life of the process.
var inputSeed = maphash.MakeSeed()

// inputDigest digests the resourceVersions of a pass's inputs, each named
// by its kind and name; the order they are added in does not matter.
type inputDigest struct{ sum, n uint64 }

func (d *inputDigest) add(kind byte, name, version string) {
	var h maphash.Hash
	h.SetSeed(inputSeed)
	_ = h.WriteByte(kind)
	_, _ = h.WriteString(name)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(version)
	d.sum += h.Sum64()
	d.n++
}

func (d *inputDigest) value() uint64 { return d.sum ^ d.n*0x9e3779b97f4a7c15 }

// passInput is one input of a pass (passInputs).
type passInput struct {
	// kind tells the input's entries apart in the digest; field is the
	// field of rollout.Observed.
	kind  byte
	field string
	// observed adds to d, under kind, what the pass observed; cached
	// what the stores hold now.
	observed func(d *inputDigest, kind byte, obj *v1alpha1.OpenMedModel, o *rollout.Observed)
	cached   func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel)
}

// The inputs of a pass, declared once: each field of rollout.Observed a
// pass takes from the caches, how the observed struct holds it and how the
// reconciler's stores hold it now. Both digests walk this one list, so a
// pass and the backstop pass that compares with it read the same inputs;
// observedFields says, for every other field of rollout.Observed, why it
// needs no place in the digest (TestObservedFieldsAreInputs holds the two
// to the struct).
var passInputs = []passInput{
	{kind: 'd', field: "Deployment",
		observed: func(d *inputDigest, kind byte, obj *v1alpha1.OpenMedModel, o *rollout.Observed) {
			desired, _ := rollout.TargetNames(obj)
			version := ""
			if o.Deployment != nil {
				version = o.Deployment.ResourceVersion
			}
			d.add(kind, desired, version)
		},
		cached: func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel) {
			desired, _ := rollout.TargetNames(obj)
			version, _ := r.stores.Deployments.Version(types.NamespacedName{Namespace: obj.Namespace, Name: desired})
			d.add(kind, desired, version)
		}},
	{kind: 'p', field: "PreviousTargets",
		observed: func(d *inputDigest, kind byte, obj *v1alpha1.OpenMedModel, o *rollout.Observed) {
			_, previous := rollout.TargetNames(obj)
			for _, name := range previous {
				version := ""
				for _, t := range o.PreviousTargets {
					if t.Name == name {
						version = t.ResourceVersion
					}
				}
				d.add(kind, name, version)
			}
		},
		cached: func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel) {
			_, previous := rollout.TargetNames(obj)
			for _, name := range previous {
				version, _ := r.stores.Deployments.Version(types.NamespacedName{Namespace: obj.Namespace, Name: name})
				d.add(kind, name, version)
			}
		}},
	{kind: 'c', field: "ConfigMaps",
		observed: func(d *inputDigest, kind byte, _ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			for i := range o.ConfigMaps {
				d.add(kind, o.ConfigMaps[i].Name, o.ConfigMaps[i].ResourceVersion)
			}
		},
		cached: func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel) {
			if obj.UID != "" {
				r.stores.ConfigMaps.Versions(obj.Namespace, obj.UID, func(name, version string) { d.add(kind, name, version) })
			}
		}},
	{kind: 'b', field: "Pods",
		observed: func(d *inputDigest, kind byte, _ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			for i := range o.Pods {
				d.add(kind, o.Pods[i].Name, o.Pods[i].ResourceVersion)
			}
		},
		cached: func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel) {
			// observe reads them for a model that bakes or whose target's
			// template carries the readiness gate, on a target it has.
			if r.hasTarget(obj) && (readsBakePods(obj) || r.gatedTarget(obj)) {
				r.stores.BakePods.Versions(rollout.OwnerKey(obj), func(name, version string) { d.add(kind, name, version) })
			}
		}},
	{kind: 'q', field: "PendingPods",
		observed: func(d *inputDigest, kind byte, _ *v1alpha1.OpenMedModel, o *rollout.Observed) {
			for i := range o.PendingPods {
				d.add(kind, o.PendingPods[i].Name, o.PendingPods[i].ResourceVersion)
			}
		},
		cached: func(d *inputDigest, kind byte, r *OpenMedModelReconciler, obj *v1alpha1.OpenMedModel) {
			if r.hasTarget(obj) {
				r.stores.PendingPods.Versions(rollout.OwnerKey(obj), func(name, version string) { d.add(kind, name, version) })
			}
		}},
}

// observedFields are the fields of rollout.Observed that are no input of
// the digest, each with why a backstop pass may skip deciding without it.
var observedFields = map[string]string{
	"ReplicaSets":       "derived from Pods and PendingPods (their controllers' UIDs), whose resourceVersions the digest holds; a pass that read a ReplicaSet leaves no digest",
	"ConfigMapContents": "read around the caches: a pass that reads a ConfigMap leaves no digest",
	"WrittenConfigMaps": "changes with a write of this process only, after which no pass leaves a digest",
	"PodsRead":          "a pass that read pods from the API server leaves no digest",
	"PodsHidden":        "derived from the target's pod template, whose resourceVersion the digest holds",
	"NotReadyNodes":     "read around the caches: a pass that read a node leaves no digest",
	"Now":               "the time: the digest keeps the earliest judgment's timer instead",
	"Failure":           "a failed pass leaves no digest",
}

// modelInput is the kind of the model's own entry in the digest.
const modelInput = 'm'

// observedInputs digests what a pass read: obj as it started, and what it
// observed from the caches.
func observedInputs(obj *v1alpha1.OpenMedModel, o *rollout.Observed) uint64 {
	return digestInputs(obj, func(d *inputDigest, in *passInput) { in.observed(d, in.kind, obj, o) })
}

// cachedInputs digests what a pass of obj would read from the caches now,
// as observe reads it, without building the objects.
func (r *OpenMedModelReconciler) cachedInputs(obj *v1alpha1.OpenMedModel) uint64 {
	return digestInputs(obj, func(d *inputDigest, in *passInput) { in.cached(d, in.kind, r, obj) })
}

// digestInputs digests obj's own entry and what add adds for each of
// passInputs.
func digestInputs(obj *v1alpha1.OpenMedModel, add func(*inputDigest, *passInput)) uint64 {
	var d inputDigest
	d.add(modelInput, obj.Name, obj.ResourceVersion)
	for i := range passInputs {
		add(&d, &passInputs[i])
	}
	return d.value()
}

// hasTarget reports whether the Deployment store holds obj's desired
// target: observe reads the pods only then.
func (r *OpenMedModelReconciler) hasTarget(obj *v1alpha1.OpenMedModel) bool {
	desired, _ := rollout.TargetNames(obj)
	_, present := r.stores.Deployments.Version(types.NamespacedName{Namespace: obj.Namespace, Name: desired})
	return present
}

// gatedTarget reports whether the Deployment store's copy of obj's target
// carries the readiness gate of the golden request (observe then reads
// the pods).
func (r *OpenMedModelReconciler) gatedTarget(obj *v1alpha1.OpenMedModel) bool {
	desired, _ := rollout.TargetNames(obj)
	return r.stores.Deployments.Gated(types.NamespacedName{Namespace: obj.Namespace, Name: desired})
}

// quietAfter is what a pass that ended as p did leaves for the next
// backstop pass, or nil. It leaves it only when the pass waits on the
// backstop timer alone, wrote nothing (no status, claim, finalizer,
// ConfigMap or Deployment write, no event, nothing a metric counts) and
// read only the caches: its
// target from the Deployment store (read), no pods from the API server,
// no node of an unready pod.
func quietAfter(p *pass, read targetRead) *quiet {
	if p.wake != wokeBackstop || read != targetCached || len(p.modelRVs) > 0 || p.plan.HasChanges() ||
		len(p.plan.Events) > 0 || len(p.plan.Drift) > 0 || len(p.plan.Conflicts) > 0 || p.plan.BakeFailure != "" ||
		p.plan.RemoveFinalizer || len(p.plan.ClaimTargets) > 0 || p.releaseLeft ||
		p.observed.PodsRead || p.readAround || p.observed.Failure != nil || !p.obj.DeletionTimestamp.IsZero() {
		return nil
	}
	for i := range p.observed.Pods {
		if readsNode(&p.observed.Pods[i]) {
			return nil
		}
	}
	x := &quiet{inputs: observedInputs(p.obj, &p.observed)}
	if p.plan.Timer > 0 {
		x.timerAt = p.observed.Now.Add(p.plan.Timer)
	}
	return x
}

// unchanged ends the backstop pass p when the caches show what the pass
// that left last read, before its earliest judgment timer: it asks for
// the next timer (the backstop's interval as a pass would compute it, or
// the judgment's when that comes first) and reports true.
func (r *OpenMedModelReconciler) unchanged(ctx context.Context, p *pass, last quiet) (ctrl.Result, bool) {
	now := r.Clock()
	if !last.timerAt.IsZero() && !now.Before(last.timerAt) {
		return ctrl.Result{}, false
	}
	// Read only: the cache's own object, not a copy.
	obj := &v1alpha1.OpenMedModel{}
	if err := r.Get(ctx, p.key, obj, client.UnsafeDisableDeepCopy); err != nil || r.cachedInputs(obj) != last.inputs {
		return ctrl.Result{}, false
	}
	after := rollout.BackstopInterval(&obj.Status, now, r.RequeueInterval)
	if !last.timerAt.IsZero() && last.timerAt.Sub(now) < after {
		return p.requeue(wokeTimer, last.timerAt.Sub(now)), true
	}
	return p.requeue(wokeBackstop, after), true
}

// readsBakePods reports whether a pass of obj reads its pods from the bake pod
// store (observe): its spec asks for a bake.
func readsBakePods(obj *v1alpha1.OpenMedModel) bool {
	b := obj.Spec.RolloutStrategy.BakeSeconds
	return b != nil && *b > 0
}

// readsNode reports whether a pass reads the node of pod from the API
// server (notReadyNodes): it is scheduled, not going away and not Ready.
func readsNode(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil && !rollout.PodReady(pod)
}
