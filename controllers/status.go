// status.go: the one status write of a pass (a JSON merge patch with the
// resourceVersion as precondition) and the bookkeeping for writes the API
// server did not answer.

package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// unanswered is a pass whose status write got no answer (a reset
// connection, a timeout, a 5xx): the write may have taken effect. Its
// events and metrics are recorded by the first later pass that reads that
// very status, and dropped by one that reads another.
type unanswered struct {
	pass *pass
	// base is the resourceVersion the write was conditional on.
	base string
}

// holdUnanswered keeps a pass whose status write may have taken effect
// without an answer. A 409 or another 4xx answer says it did not.
func (r *OpenMedModelReconciler) holdUnanswered(p *pass, err error) {
	if apierrors.IsConflict(err) || classify(err) != rollout.Transient || apierrors.IsNotFound(err) || apierrors.IsTooManyRequests(err) {
		return
	}
	r.memory.update(p.key, func(m *modelRecord) { m.unanswered = &unanswered{pass: p, base: p.obj.ResourceVersion} })
}

func (r *OpenMedModelReconciler) dropUnanswered(key types.NamespacedName) {
	r.memory.read(key, func(m *modelRecord) { m.unanswered = nil })
}

// recordUnanswered settles the unanswered write of key against obj, the
// resource as this pass read it: a status equal to the one the write sent
// means it took effect, and its events and metrics are recorded now; any
// other newer version means it did not. The same version as the write's
// precondition settles nothing yet.
func (r *OpenMedModelReconciler) recordUnanswered(key types.NamespacedName, obj *v1alpha1.OpenMedModel) {
	var u *unanswered
	r.memory.read(key, func(m *modelRecord) {
		if m.unanswered != nil && obj.ResourceVersion != m.unanswered.base {
			u, m.unanswered = m.unanswered, nil
		}
	})
	if u != nil && apiequality.Semantic.DeepEqual(obj.Status, u.pass.plan.Status) {
		r.record(u.pass)
	}
}

// patchStatus writes the planned status in one merge patch guarded by the
// resourceVersion the pass read, and nothing when it is unchanged: a steady
// pass makes no write at all. The patch is the merge diff of the status
// alone (metadata.resourceVersion is the precondition), so a write costs
// what changed, not two encodings of the whole object.
func (r *OpenMedModelReconciler) patchStatus(ctx context.Context, p *pass) error {
	if apiequality.Semantic.DeepEqual(p.obj.Status, p.plan.Status) {
		return nil
	}
	rv := p.obj.ResourceVersion
	diff, err := statusMergePatch(p.obj.Status, p.plan.Status)
	if err != nil {
		return err
	}
	body := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"status":%s}`, rv, diff)
	answer, err := r.patchModelStatus(ctx, p.obj, body)
	if err != nil {
		if !p.obj.DeletionTimestamp.IsZero() && apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch status of OpenMedModel %s/%s: %w", p.obj.Namespace, p.obj.Name, err)
	}
	// The patch applied to exactly the status the pass read (the
	// resourceVersion precondition): the model now holds the plan's status.
	p.obj.ResourceVersion, p.obj.Status = answer, p.plan.Status
	p.modelRVs = append(p.modelRVs, rv)
	return nil
}

// patchModelStatus sends a JSON merge patch of obj's status subresource and
// returns the resourceVersion the API server stored it as. The answer is
// asked for as metadata only (PartialObjectMetadata, in protobuf): the pass
// already holds the status it sent, and decoding the whole model from JSON
// once per status write was a tenth of what the operator allocated.
func (r *OpenMedModelReconciler) patchModelStatus(ctx context.Context, obj *v1alpha1.OpenMedModel, body []byte) (string, error) {
	answer := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name}}
	answer.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
	if err := r.Status().Patch(ctx, answer, client.RawPatch(types.MergePatchType, body), client.FieldOwner(StatusFieldOwner)); err != nil {
		return "", err
	}
	return answer.ResourceVersion, nil
}

// recordClaims writes the plan's write-ahead record before any of its
// writes: the Deployments it writes to that the status does not list yet
// join status.claimedTargets, in one status patch guarded by the
// resourceVersion the pass read. Should the pass's own status write be lost
// afterwards (a conflict with a spec edit, a crash), the next pass still
// finds every Deployment the operator may have written and releases it on
// a retarget or at deletion. Nothing is written when the plan claims no
// new Deployment (an upgrade, a steady pass).
func (r *OpenMedModelReconciler) recordClaims(ctx context.Context, p *pass) error {
	if len(p.plan.ClaimTargets) == 0 {
		return nil
	}
	claimed := rollout.ClaimedTargets(&p.obj.Status)
	for _, name := range p.plan.ClaimTargets {
		if !slices.Contains(claimed, name) {
			claimed = append(claimed, name)
		}
	}
	slices.Sort(claimed)
	list, err := json.Marshal(claimed)
	if err != nil {
		return err
	}
	rv := p.obj.ResourceVersion
	body := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"status":{"claimedTargets":%s}}`, rv, list)
	answer, err := r.patchModelStatus(ctx, p.obj, body)
	if err != nil {
		return fmt.Errorf("record the claimed targets of OpenMedModel %s/%s: %w", p.obj.Namespace, p.obj.Name, err)
	}
	// p.obj now holds what the server stored: the pass's status write is
	// guarded by its resourceVersion and diffs against its status.
	p.obj.ResourceVersion, p.obj.Status.ClaimedTargets = answer, claimed
	p.modelRVs = append(p.modelRVs, rv)
	return nil
}

// statusMergePatch is the JSON merge patch from one status to another.
func statusMergePatch(from, to v1alpha1.OpenMedModelStatus) ([]byte, error) {
	a, err := json.Marshal(from)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(to)
	if err != nil {
		return nil, err
	}
	return mergePatch(a, b)
}

// mergePatch returns the JSON merge patch (RFC 7386) from the JSON object
// from to the JSON object to, as json-patch's CreateMergePatch does: a key
// to lacks is null, a key whose value differs gets to's value, and where
// both values are objects the patch holds their merge patch instead. It
// decodes one level of each object at a time into raw values, not the whole
// documents into maps of interfaces: a status write made the operator
// allocate several times the status's size in json-patch.
func mergePatch(from, to []byte) ([]byte, error) {
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(from, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(to, &b); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := append(make([]byte, 0, len(to)), '{')
	for _, k := range keys {
		av, inA := a[k]
		bv, inB := b[k]
		var v []byte
		switch {
		case !inB:
			v = []byte("null")
		case !inA:
			v = bv
		case bytes.Equal(av, bv):
			continue
		case isJSONObject(av) && isJSONObject(bv):
			sub, err := mergePatch(av, bv)
			if err != nil {
				return nil, err
			}
			v = sub
		default:
			v = bv
		}
		key, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, key...), ':'), v...)
	}
	return append(out, '}'), nil
}

// isJSONObject reports whether a raw JSON value is an object.
func isJSONObject(v []byte) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}
