// memory.go: what the reconciler keeps of each model between its passes.

package controllers

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// memory is what the reconciler keeps of each model between its passes,
// in one record per model under one lock: a model that is gone is
// forgotten by one delete, and a new kind of memory is a field of
// modelRecord, not another map to clear. The helpers that read and write
// a part of it (backoff, wakes, quietPasses, ...) are views of it.
//
// A record is made by a pass of the model (or a write of it) and dropped
// by the pass that finds the model gone (forget); the stores' event
// handlers only read (podWatchers.watched), so a pod no model owns makes
// no record.
type memory struct {
	mu     sync.Mutex
	models map[types.NamespacedName]*modelRecord
}

// modelRecord is one model's memory. Parts set only now and then are
// pointers: the record of a steady model stays small.
type modelRecord struct {
	// retries and unclaimed count the failed passes and the rechecks of a
	// target outside the cache (backoff.go).
	retries, unclaimed *backoffItem
	// wake is the timer the last pass asked for (wakes.go).
	wake *wake
	// podsUnwatched: the last pass decided that it judges no bake
	// (podWatchers, wakes.go).
	podsUnwatched bool
	// quiet is what the last backstop-only pass read (quiet.go).
	quiet *quiet
	// lag is the model's own status writes the cache has not shown yet
	// (cacheLag, lag.go); created the manifest ConfigMaps created and not
	// cached yet (manifestLag, lag.go).
	lag     *lagRecord
	created []createdManifest
	// written are the manifest ConfigMaps created and not recorded in the
	// status yet (writtenManifests).
	written []v1alpha1.VerifiedConfigMap
	// replicaSets are the verdicts on ReplicaSets read from the API server
	// (replicasets.go).
	replicaSets *modelReplicaSets
	// rolloutFrom is when the rollout in flight started (record.go).
	rolloutFrom time.Time
	// unanswered is a pass whose status write got no answer (status.go).
	unanswered *unanswered
}

func newMemory() *memory {
	return &memory{models: map[types.NamespacedName]*modelRecord{}}
}

// update runs f on the record of key, made when there is none. On a nil
// memory (a reconciler that was not set up) f runs on a record that is
// not kept.
func (m *memory) update(key types.NamespacedName, f func(*modelRecord)) {
	if m == nil {
		f(&modelRecord{})
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.models[key]
	if rec == nil {
		rec = &modelRecord{}
		m.models[key] = rec
	}
	f(rec)
}

// read runs f on the record of key when there is one.
func (m *memory) read(key types.NamespacedName, f func(*modelRecord)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec := m.models[key]; rec != nil {
		f(rec)
	}
}

// forget drops the record of key, a model that is gone.
func (m *memory) forget(key types.NamespacedName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.models, key)
}

// writtenManifests remembers, per model, the manifest ConfigMaps this
// process created (rollout.Observed.WrittenConfigMaps): by the UID the
// create answered with and the manifest hash of what it wrote, until the
// model's status records them (status.verifiedConfigMaps, written with the
// next status write a pass makes anyway). A process that starts without
// them reads such a ConfigMap once.
type writtenManifests struct{ mem *memory }

// add remembers rec as written for model, in place of an earlier write of
// its name.
func (w writtenManifests) add(model types.NamespacedName, rec v1alpha1.VerifiedConfigMap) {
	w.mem.update(model, func(m *modelRecord) {
		m.written = append(slices.DeleteFunc(m.written, func(r v1alpha1.VerifiedConfigMap) bool { return r.Name == rec.Name }), rec)
	})
}

// unrecorded returns the writes of model that recorded (the model's
// status.verifiedConfigMaps) does not hold and that are still among cached
// (the model's ConfigMaps as the store has them), and forgets the others.
func (w writtenManifests) unrecorded(model types.NamespacedName, recorded []v1alpha1.VerifiedConfigMap, cached []corev1.ConfigMap) (out []v1alpha1.VerifiedConfigMap) {
	w.mem.read(model, func(m *modelRecord) {
		m.written = slices.DeleteFunc(m.written, func(r v1alpha1.VerifiedConfigMap) bool {
			return slices.Contains(recorded, r) || !slices.ContainsFunc(cached, func(cm corev1.ConfigMap) bool { return cm.Name == r.Name && cm.UID == r.UID })
		})
		if len(m.written) == 0 {
			m.written = nil
		}
		out = slices.Clone(m.written)
	})
	return out
}
