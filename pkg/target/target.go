// Package target makes the operator's writes to a Deployment it does not own
// and to its own manifest ConfigMaps: server-side apply of the partial intent
// with the operator's field manager, the two-step release that gives fields
// back without resetting them, and the removal of one field from the
// operator's managedFields entry. Each function sends one request per change
// and returns the server's answer, so callers never read an object back.
//
// It holds no decisions: pkg/rollout decides what to write, and the
// reconciler in controllers/ calls these functions in the plan's order.
package target

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Apply server-side applies intent, a partial Deployment, with fieldManager,
// taking ownership of the fields it names (ForceOwnership: the fields are the
// operator's by contract). When precondition is not empty the write requires
// the Deployment to still have that resourceVersion, so two writers cannot
// both claim an unclaimed target. It returns the metadata of the Deployment
// as the API server stored it (managedFields included): the answer is asked
// for as PartialObjectMetadata, in protobuf, not as the whole Deployment. An
// apply that changes nothing is answered with the same resourceVersion.
func Apply(ctx context.Context, c client.Client, intent *unstructured.Unstructured, fieldManager, precondition string) (*metav1.PartialObjectMetadata, error) {
	obj := intent
	if precondition != "" {
		obj = intent.DeepCopy()
		obj.SetResourceVersion(precondition)
	}
	body, err := obj.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("apply %s to Deployment %s/%s: %w", fieldManager, intent.GetNamespace(), intent.GetName(), err)
	}
	answer := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: intent.GetNamespace(), Name: intent.GetName()}}
	answer.SetGroupVersionKind(intent.GroupVersionKind())
	if err := c.Patch(ctx, answer, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply %s to Deployment %s/%s: %w", fieldManager, intent.GetNamespace(), intent.GetName(), err)
	}
	return answer, nil
}

// Written is what the API server answered a write of a Deployment with:
// the version and generation it stored. A caller that recorded the answers
// knows which versions its cache may still show from before the write.
type Written struct {
	ResourceVersion string
	Generation      int64
	// Labels are the object's labels in the answer: whether a cache that
	// selects by label holds this version.
	Labels map[string]string
}

func written(obj metav1.Object) Written {
	return Written{ResourceVersion: obj.GetResourceVersion(), Generation: obj.GetGeneration(), Labels: obj.GetLabels()}
}

// Release gives a Deployment back without resetting anything
// (ssa-facts.md): apply keep (the fields to leave at their live values, and
// nothing else), conditional on precondition (the version keep was read
// from) when it is not empty, then, in one request conditional on the
// version the apply answered with, remove every managedFields entry of
// fieldManager, the annotation ownerAnnotation and the labels keep carries
// (keep carries them, so the Deployment names its owner, and stays in the
// caches that select it by those labels, until nothing of the operator is
// left).
// It returns the answers of the requests that were answered, in order. A
// Deployment that is gone needs no release.
//
// Either request meets a 409 Conflict when the Deployment changed since the
// version it is conditional on (the Deployment controller writes its status
// right after the template change the apply makes): the caller decides
// again on the newer version, and finds the rest of the release from what
// the Deployment then shows.
func Release(ctx context.Context, c client.Client, keep *unstructured.Unstructured, fieldManager, precondition, ownerAnnotation string) ([]Written, error) {
	applied, err := Apply(ctx, c, keep, fieldManager, precondition)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	answers := []Written{written(applied)}
	kept := WithoutManager(applied.GetManagedFields(), fieldManager)
	_, annotated := applied.GetAnnotations()[ownerAnnotation]
	var labels []string
	for k := range keep.GetLabels() {
		// A label another manager also set stays theirs.
		if _, ok := applied.GetLabels()[k]; ok && !ownedByAny(kept, fieldpath.MakePathOrDie("metadata", "labels", k)) {
			labels = append(labels, k)
		}
	}
	sort.Strings(labels)
	if len(kept) == len(applied.GetManagedFields()) && !annotated && len(labels) == 0 {
		return answers, nil
	}
	if len(kept) == 0 {
		// An empty list would leave managedFields unchanged; one empty
		// entry clears them.
		kept = []metav1.ManagedFieldsEntry{{}}
	}
	var drop []string
	if annotated {
		drop = append(drop, ownerAnnotation)
	}
	live, err := replaceManagedFields(ctx, c, applied.GetNamespace(), applied.GetName(), applied.GetResourceVersion(), kept, fieldManager, drop, labels)
	if err != nil {
		return answers, client.IgnoreNotFound(fmt.Errorf("drop field manager %q from Deployment %s/%s: %w", fieldManager, applied.GetNamespace(), applied.GetName(), err))
	}
	return append(answers, written(live)), nil
}

// ownedByAny reports whether one of entries owns path.
func ownedByAny(entries []metav1.ManagedFieldsEntry, path fieldpath.Path) bool {
	for _, e := range entries {
		if e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err == nil && set.Has(path) {
			return true
		}
	}
	return false
}

// WithoutManager returns entries without any entry of fieldManager, of any
// operation or subresource.
func WithoutManager(entries []metav1.ManagedFieldsEntry, fieldManager string) []metav1.ManagedFieldsEntry {
	var kept []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if e.Manager != fieldManager {
			kept = append(kept, e)
		}
	}
	return kept
}

// DropField removes path from fieldManager's Apply entry on the Deployment
// namespace/name, leaving the field's value in place with no owner: the next
// apply without the field does not reset it. The managedFields are read from
// reader (the API server, not a cache that may hold them pruned) and the
// write is guarded by the resourceVersion read (a 409 Conflict when the
// Deployment changed in between). It returns the version read and the
// answer of the write; the answer is empty when the entry does not own the
// field.
func DropField(ctx context.Context, c client.Client, reader client.Reader, namespace, name, fieldManager string, path fieldpath.Path) (read, answer Written, err error) {
	dep := &appsv1.Deployment{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dep); err != nil {
		return Written{}, Written{}, fmt.Errorf("read Deployment %s/%s: %w", namespace, name, err)
	}
	read = written(dep)
	entries, changed, err := WithoutField(dep.ManagedFields, fieldManager, path)
	if err != nil {
		return read, Written{}, fmt.Errorf("read managedFields of Deployment %s/%s: %w", namespace, name, err)
	}
	if !changed {
		return read, Written{}, nil
	}
	live, err := replaceManagedFields(ctx, c, namespace, name, dep.ResourceVersion, entries, fieldManager, nil, nil)
	if err != nil {
		return read, Written{}, fmt.Errorf("drop %s from field manager %q on Deployment %s/%s: %w", path, fieldManager, namespace, name, err)
	}
	return read, written(live), nil
}

// WithoutField returns entries with path removed from fieldManager's Apply
// entry, and whether anything changed.
func WithoutField(entries []metav1.ManagedFieldsEntry, fieldManager string, path fieldpath.Path) ([]metav1.ManagedFieldsEntry, bool, error) {
	out := append([]metav1.ManagedFieldsEntry(nil), entries...)
	changed := false
	for i, e := range out {
		if e.Manager != fieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil, false, err
		}
		if !set.Has(path) {
			continue
		}
		raw, err := set.Difference(fieldpath.NewSet(path)).ToJSON()
		if err != nil {
			return nil, false, err
		}
		out[i].FieldsV1 = &metav1.FieldsV1{Raw: raw}
		changed = true
	}
	return out, changed, nil
}

// replaceManagedFields replaces a Deployment's managedFields with entries,
// and removes the annotations named, in one JSON patch conditional on
// resourceVersion, and returns the patched object's metadata: the patch sets
// metadata.resourceVersion, which the API server compares with the stored
// one (409 Conflict on a mismatch; a JSON patch "test" op would fail as 422
// Invalid instead, indistinguishable from a rejected request). The request
// is sent as fieldManager; with managedFields given explicitly and no field
// set, the API server records no entry for it.
func replaceManagedFields(ctx context.Context, c client.Client, namespace, name, resourceVersion string, entries []metav1.ManagedFieldsEntry, fieldManager string, dropAnnotations, dropLabels []string) (*metav1.PartialObjectMetadata, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: resourceVersion},
		{Op: "replace", Path: "/metadata/managedFields", Value: entries},
	}
	escape := strings.NewReplacer("~", "~0", "/", "~1").Replace
	for _, a := range dropAnnotations {
		ops = append(ops, op{Op: "remove", Path: "/metadata/annotations/" + escape(a)})
	}
	for _, l := range dropLabels {
		ops = append(ops, op{Op: "remove", Path: "/metadata/labels/" + escape(l)})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	live := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	live.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if err := c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, data), client.FieldOwner(fieldManager)); err != nil {
		return nil, err
	}
	return live, nil
}

// CreateConfigMap creates an immutable manifest ConfigMap and returns its
// UID as the API server answered. Its name is its content's hash, so one
// that exists already is either this one (created by an earlier pass the
// cache has not caught up with) or another object: the AlreadyExists
// answer is settled with one read, and ErrNameTaken reports a ConfigMap the
// owner UID does not control, ErrManifestMismatch one it controls that
// holds other data or is not immutable (someone else created it under the
// name; it must not be pointed at). The existing ConfigMap's UID is
// returned with either.
//
// A ConfigMap of the owner whose labels differ from cm's (a model that moved
// to another shard finds the ConfigMaps of its versions labelled for the old
// one, outside the new shard's cache) is labelled as cm is, in one merge
// patch conditional on its resourceVersion (labels are not data: an
// immutable ConfigMap takes them): cm's labels are set and the keys in drop
// removed.
func CreateConfigMap(ctx context.Context, c client.Client, reader client.Reader, cm *corev1.ConfigMap, owner types.UID, drop ...string) (types.UID, error) {
	created := cm.DeepCopy()
	err := c.Create(ctx, created)
	if err == nil {
		return created.UID, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	existing := &corev1.ConfigMap{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(cm), existing); err != nil {
		return "", fmt.Errorf("read existing ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if ref := metav1.GetControllerOfNoCopy(existing); ref == nil || ref.UID != owner {
		return existing.UID, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, ErrNameTaken)
	}
	if !ptr.Deref(existing.Immutable, false) || !maps.Equal(existing.Data, cm.Data) {
		return existing.UID, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, ErrManifestMismatch)
	}
	relabel := map[string]any{}
	for k, v := range cm.Labels {
		if have, ok := existing.Labels[k]; !ok || have != v {
			relabel[k] = v
		}
	}
	for _, k := range drop {
		if _, ok := existing.Labels[k]; ok {
			relabel[k] = nil
		}
	}
	if len(relabel) == 0 {
		return existing.UID, nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": relabel, "resourceVersion": existing.ResourceVersion}})
	if err != nil {
		return "", err
	}
	if err := c.Patch(ctx, existing, client.RawPatch(types.MergePatchType, data)); err != nil {
		return "", fmt.Errorf("label ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return existing.UID, nil
}

// LabelConfigMap sets the labels of the ConfigMap namespace/name of UID uid
// in one merge patch (a nil value removes a label); only labels, so an
// immutable ConfigMap takes it. The patch carries the UID: the API server
// refuses it for another ConfigMap of that name (the UID of an object
// cannot change), and ErrReplaced says so. A ConfigMap that is gone needs
// no labels.
func LabelConfigMap(ctx context.Context, c client.Client, namespace, name string, uid types.UID, labels map[string]*string) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "labels": labels}})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	err = c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, data))
	switch {
	case apierrors.IsNotFound(err) || err == nil:
		return nil
	case uidRefused(err):
		return fmt.Errorf("label ConfigMap %s/%s: %w", namespace, name, ErrReplaced)
	}
	return fmt.Errorf("label ConfigMap %s/%s: %w", namespace, name, err)
}

// uidRefused reports the API server's answer to a write whose UID
// precondition another object of the name failed: a delete's 409 (its only
// precondition is the UID: "the UID in the precondition … does not match
// the UID in record"), or a patch's 422 on metadata.uid (an object's UID
// never changes).
func uidRefused(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Field == "metadata.uid" {
				return true
			}
		}
	}
	return false
}

// ErrManifestMismatch says a manifest ConfigMap the resource controls holds
// other content than the manifest of its name.
var ErrManifestMismatch = errors.New("the ConfigMap holds other content than the manifest")

// ErrReplaced says a write conditional on a ConfigMap's UID met another
// ConfigMap of that name: the one the pass read was deleted and another
// created.
var ErrReplaced = errors.New("the ConfigMap was replaced by another of the same name")

// ErrNameTaken says a manifest ConfigMap name is used by an object the
// resource does not own.
var ErrNameTaken = errors.New("the name is taken by an object this resource does not own")

// DeleteConfigMap deletes the manifest ConfigMap namespace/name of UID uid,
// with the UID as precondition: another ConfigMap created under the name
// since the pass read it is not deleted (ErrReplaced). One that is gone
// already is fine.
func DeleteConfigMap(ctx context.Context, c client.Client, namespace, name string, uid types.UID) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	err := c.Delete(ctx, cm, client.Preconditions{UID: &uid})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return nil
	case uidRefused(err):
		return fmt.Errorf("delete ConfigMap %s/%s: %w", namespace, name, ErrReplaced)
	}
	return fmt.Errorf("delete ConfigMap %s/%s: %w", namespace, name, err)
}
