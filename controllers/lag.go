package controllers

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/target"
)

// cacheLag remembers, per object, what the operator's own last writes moved
// it on from: a cache that still shows such a version has not caught up with
// the write. A pass that meets one waits for the watch event that brings the
// write instead of deciding again on old state (which would repeat the
// write, or call the missing write drift) or reading the object from the API
// server (one more request per change).
//
// Two facts say "older than our write":
//   - a resourceVersion the write was conditional on or answered before its
//     last answer (exact, but it cannot know a version somebody else wrote
//     in between: an HPA's or the Deployment controller's write landing
//     between the cached version and an unconditional apply);
//   - a generation below the one the last answer carries. Generations only
//     grow, so for writes that change the spec (a pointer apply, a release)
//     this also covers every version written before the answer by anybody.
//
// The last answered version itself is never recorded: a write whose answer
// was lost may not have happened, and the cache showing the last known
// state is caught up. A record also lapses after lagExpiry: a cache that
// lags that long is a fault of its own, and deciding on what it shows is
// better than waiting for good. A record of a write that left the object
// outside a label-selected cache (a release, a claim that met a conflict)
// ends at the next pass that misses the object (expecting).
type cacheLag struct {
	// at runs f on the record of key (nil: none; f may set or clear it),
	// under a lock; a record is made only where create is true.
	at func(key types.NamespacedName, create bool, f func(rec **lagRecord))
}

// lagExpiry bounds how long a pass waits for the cache to show a write.
const lagExpiry = 20 * time.Second

type lagRecord struct {
	uid   types.UID
	since time.Time
	// generation is the watermark: a cached generation below it predates
	// the write.
	generation int64
	// versions are the resourceVersions the writes moved on from (one or
	// two: a slice costs a fraction of a map, and a record per object
	// can outlive its pass).
	versions []string
	// inCache: the version the write left is one the cache selects (the
	// operator's claim label is on it), so a cache without the object has
	// not caught up yet. A released Deployment, or one whose claim did not
	// happen (a conflict), leaves the label-selected cache or never enters
	// it: no event will bring it.
	inCache bool
}

// newCacheLag is a cacheLag of its own objects (the targets: a record per
// Deployment).
func newCacheLag() *cacheLag {
	var mu sync.Mutex
	seen := map[types.NamespacedName]*lagRecord{}
	return &cacheLag{at: func(key types.NamespacedName, _ bool, f func(**lagRecord)) {
		mu.Lock()
		defer mu.Unlock()
		rec := seen[key]
		f(&rec)
		if rec == nil {
			delete(seen, key)
		} else {
			seen[key] = rec
		}
	}}
}

// modelCacheLag is the cacheLag of the models' own status writes, kept
// in their records.
func modelCacheLag(mem *memory) *cacheLag {
	return &cacheLag{at: func(key types.NamespacedName, create bool, f func(**lagRecord)) {
		run := func(m *modelRecord) { f(&m.lag) }
		if create {
			mem.update(key, run)
		} else {
			mem.read(key, run)
		}
	}}
}

// wrote records that the object key (uid) moved on from the versions in
// old, to generation at least.
func (l *cacheLag) wrote(key types.NamespacedName, uid types.UID, generation int64, old ...string) {
	l.wroteSelected(key, uid, generation, true, old...)
}

// wroteSelected is wrote saying whether the cache selects the version the
// write left (see lagRecord.inCache).
func (l *cacheLag) wroteSelected(key types.NamespacedName, uid types.UID, generation int64, inCache bool, old ...string) {
	l.at(key, true, func(p **lagRecord) {
		rec := *p
		if rec == nil || rec.uid != uid {
			rec = &lagRecord{uid: uid}
		}
		rec.since = time.Now()
		for _, rv := range old {
			if rv != "" && !slices.Contains(rec.versions, rv) {
				rec.versions = append(rec.versions, rv)
			}
		}
		rec.generation = max(rec.generation, generation)
		rec.inCache = inCache
		if len(rec.versions) == 0 && rec.generation == 0 {
			return
		}
		*p = rec
	})
}

// behind reports whether the cached object key (uid, resourceVersion rv,
// generation) predates the operator's last write; once it does not, the
// record is dropped. Another object of the same name (a new uid) never
// waits for a write to the old one.
func (l *cacheLag) behind(key types.NamespacedName, uid types.UID, rv string, generation int64) bool {
	behind := false
	l.at(key, false, func(p **lagRecord) {
		rec := *p
		if rec == nil {
			return
		}
		if rec.uid == uid && (slices.Contains(rec.versions, rv) || generation < rec.generation) && time.Since(rec.since) < lagExpiry {
			behind = true
			return
		}
		*p = nil
	})
	return behind
}

// waiting reports whether a record exists for key: its next watch event is
// the one a pass waits for.
func (l *cacheLag) waiting(key types.NamespacedName) bool {
	waiting := false
	l.at(key, false, func(p **lagRecord) { waiting = *p != nil })
	return waiting
}

// expecting reports whether the operator's last write to key left a
// version the cache selects, recently enough (lagExpiry) that an object the
// cache does not hold is still on its way (a Deployment the operator just
// claimed). A record of a version the cache does not select (a finished
// release, a claim that met a conflict) is dropped: no event will end it,
// and the caller reads the object instead.
func (l *cacheLag) expecting(key types.NamespacedName) bool {
	expecting := false
	l.at(key, false, func(p **lagRecord) {
		rec := *p
		if rec != nil && (!rec.inCache || time.Since(rec.since) >= lagExpiry) {
			*p = nil
			return
		}
		expecting = rec != nil
	})
	return expecting
}

// lagWrites follows the writes of one pass to one object, in order, and
// records them in a cacheLag when the pass is done with the object.
type lagWrites struct {
	lag *cacheLag
	key types.NamespacedName
	uid types.UID
	// selects says whether the cache holds an object with these labels
	// (nil: every object); inCache whether it holds the last known version.
	selects func(map[string]string) bool
	inCache bool
	last    struct {
		rv  string
		gen int64
	}
	older []string
}

// track starts following writes to the object that the pass read at
// version rv and generation gen.
func (l *cacheLag) track(key types.NamespacedName, uid types.UID, rv string, gen int64) *lagWrites {
	w := &lagWrites{lag: l, key: key, uid: uid, inCache: true}
	w.last.rv, w.last.gen = rv, gen
	return w
}

// trackSelected is track for an object the cache selects by label: labels
// are the version the pass read.
func (l *cacheLag) trackSelected(key types.NamespacedName, uid types.UID, rv string, gen int64, labels map[string]string, selects func(map[string]string) bool) *lagWrites {
	w := l.track(key, uid, rv, gen)
	w.selects, w.inCache = selects, selects(labels)
	return w
}

// moved records that the object is now known at version rv, generation
// gen (a write's answer, or a fresh read); "" changes nothing.
func (w *lagWrites) moved(rv string, gen int64) {
	if rv == "" || rv == w.last.rv {
		return
	}
	w.older = append(w.older, w.last.rv)
	w.last.rv, w.last.gen = rv, max(w.last.gen, gen)
}

// movedTo is moved for an answer with its labels.
func (w *lagWrites) movedTo(a target.Written) {
	if a.ResourceVersion == "" || a.ResourceVersion == w.last.rv {
		return
	}
	w.moved(a.ResourceVersion, a.Generation)
	if w.selects != nil {
		w.inCache = w.selects(a.Labels)
	}
}

// conflicted records that a write conditional on the last known version
// met a newer one: the cache shows at best that older version, and the pass
// decides again once it shows the newer one.
func (w *lagWrites) conflicted() {
	w.older = append(w.older, w.last.rv)
}

// done records what the pass's writes moved the object on from.
func (w *lagWrites) done() {
	if len(w.older) > 0 {
		w.lag.wroteSelected(w.key, w.uid, w.last.gen, w.inCache, w.older...)
	}
}

// manifestLag remembers, per model, the manifest ConfigMaps the operator
// created (or found as the model's and labelled for this shard, see
// target.CreateConfigMap), with labels the ConfigMap cache selects, and the
// cache does not show yet. A pass that misses one waits for its watch event (the
// ConfigMap's create wakes its owner) instead of creating it again: a
// second create would be answered AlreadyExists and cost a read to tell the
// model's own ConfigMap from a foreign one. A record ends when the cache
// shows the ConfigMap, or after lagExpiry (a ConfigMap deleted as soon as
// it was created is then created again).
type manifestLag struct{ mem *memory }

type createdManifest struct {
	uid   types.UID // the model's
	name  string
	since time.Time
}

// created records that the ConfigMap name of model (uid) was written.
func (l manifestLag) created(model types.NamespacedName, uid types.UID, name string) {
	l.mem.update(model, func(m *modelRecord) {
		m.created = append(slices.DeleteFunc(m.created, func(c createdManifest) bool { return c.name == name || c.uid != uid }),
			createdManifest{uid: uid, name: name, since: time.Now()})
	})
}

// missing reports whether a ConfigMap recorded for model (uid) is not among
// cached: the cache has not caught up with the create. Records of the
// ConfigMaps cached, of another uid or past lagExpiry are dropped.
func (l manifestLag) missing(model types.NamespacedName, uid types.UID, cached []corev1.ConfigMap) bool {
	missing := false
	l.mem.read(model, func(m *modelRecord) {
		m.created = slices.DeleteFunc(m.created, func(c createdManifest) bool {
			return c.uid != uid || time.Since(c.since) >= lagExpiry ||
				slices.ContainsFunc(cached, func(cm corev1.ConfigMap) bool { return cm.Name == c.name })
		})
		if len(m.created) == 0 {
			m.created = nil
		}
		missing = len(m.created) > 0
	})
	return missing
}
