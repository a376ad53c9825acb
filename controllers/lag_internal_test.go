package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/target"
)

// TestCacheLagExpectsOnlyWhatTheCacheSelects: after a write that left the
// Deployment labelled for the cache (a claim), a pass that misses it waits
// for its watch event; after one that left it outside (a finished release,
// a claim that met a conflict on a Deployment read around the cache), no
// event will come, so the pass reads it at once and the record goes.
func TestCacheLagExpectsOnlyWhatTheCacheSelects(t *testing.T) {
	selects := func(l map[string]string) bool { return l[v1alpha1.ClaimedLabel] == "true" }
	claimed := map[string]string{v1alpha1.ClaimedLabel: "true"}
	key := types.NamespacedName{Namespace: "ns", Name: "d"}
	for _, tc := range []struct {
		name    string
		read    map[string]string
		answers []target.Written
		want    bool
	}{
		{"a claim of a Deployment read around the cache", nil, []target.Written{{ResourceVersion: "2", Generation: 2, Labels: claimed}}, true},
		{"a claim that met a conflict", nil, nil, false},
		{"a finished release", claimed, []target.Written{{ResourceVersion: "2", Generation: 2, Labels: claimed}, {ResourceVersion: "3", Generation: 3}}, false},
		{"a release stopped after its first request", claimed, []target.Written{{ResourceVersion: "2", Generation: 2, Labels: claimed}}, true},
	} {
		// The targets' records are the cacheLag's own, the models' are
		// in their memory records: the two behave the same.
		for kind, lag := range map[string]func() *cacheLag{"target": newCacheLag, "model": func() *cacheLag { return modelCacheLag(newMemory()) }} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				lag := lag()
				w := lag.trackSelected(key, "uid", "1", 1, tc.read, selects)
				for _, a := range tc.answers {
					w.movedTo(a)
				}
				if tc.answers == nil {
					w.conflicted()
				}
				w.done()
				if got := lag.expecting(key); got != tc.want {
					t.Errorf("expecting = %t, want %t", got, tc.want)
				}
				if !tc.want && lag.waiting(key) {
					t.Error("the record stayed")
				}
			})
		}
	}
}

// TestManifestLagWaitsForTheCreatedConfigMap: a pass that misses a
// ConfigMap the operator just created for the model waits (missing) until
// the cache shows it; a record of the model's earlier incarnation (another
// uid) or one past lagExpiry waits for nothing.
func TestManifestLagWaitsForTheCreatedConfigMap(t *testing.T) {
	model := types.NamespacedName{Namespace: "ns", Name: "m"}
	for _, tc := range []struct {
		name    string
		uid     types.UID
		cached  []string // the names of the cached ConfigMaps
		expired bool
		want    bool
	}{
		{"not cached yet", "uid", []string{"openmed-old"}, false, true},
		{"cached", "uid", []string{"openmed-new", "openmed-old"}, false, false},
		{"another model of the same name", "uid-2", nil, false, false},
		{"past lagExpiry", "uid", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newMemory()
			lag := manifestLag{mem}
			lag.created(model, "uid", "openmed-new")
			if tc.expired {
				mem.models[model].created[0].since = time.Now().Add(-lagExpiry)
			}
			var cached []corev1.ConfigMap
			for _, name := range tc.cached {
				cached = append(cached, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
			if got := lag.missing(model, tc.uid, cached); got != tc.want {
				t.Errorf("missing = %t, want %t", got, tc.want)
			}
			if left := mem.models[model].created; !tc.want && len(left) != 0 {
				t.Errorf("records left: %v", left)
			}
		})
	}
}
