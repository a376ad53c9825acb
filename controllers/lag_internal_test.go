package controllers

import (
	"testing"

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
		t.Run(tc.name, func(t *testing.T) {
			lag := newCacheLag()
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
