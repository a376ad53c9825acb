package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
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
// better than waiting for good.
type cacheLag struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]*lagRecord
}

// lagExpiry bounds how long a pass waits for the cache to show a write.
const lagExpiry = 20 * time.Second

type lagRecord struct {
	uid   types.UID
	since time.Time
	// generation is the watermark: a cached generation below it predates
	// the write.
	generation int64
	versions   map[string]bool
}

func newCacheLag() *cacheLag {
	return &cacheLag{seen: map[types.NamespacedName]*lagRecord{}}
}

// wrote records that the object key (uid) moved on from the versions in
// old, to generation at least.
func (l *cacheLag) wrote(key types.NamespacedName, uid types.UID, generation int64, old ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.seen[key]
	if rec == nil || rec.uid != uid {
		rec = &lagRecord{uid: uid, versions: map[string]bool{}}
	}
	rec.since = time.Now()
	for _, rv := range old {
		if rv != "" {
			rec.versions[rv] = true
		}
	}
	rec.generation = max(rec.generation, generation)
	if len(rec.versions) == 0 && rec.generation == 0 {
		return
	}
	l.seen[key] = rec
}

// behind reports whether the cached object key (uid, resourceVersion rv,
// generation) predates the operator's last write; once it does not, the
// record is dropped. Another object of the same name (a new uid) never
// waits for a write to the old one.
func (l *cacheLag) behind(key types.NamespacedName, uid types.UID, rv string, generation int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.seen[key]
	if rec == nil {
		return false
	}
	if rec.uid == uid && (rec.versions[rv] || generation < rec.generation) && time.Since(rec.since) < lagExpiry {
		return true
	}
	delete(l.seen, key)
	return false
}

// waiting reports whether a record exists for key: its next watch event is
// the one a pass waits for.
func (l *cacheLag) waiting(key types.NamespacedName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[key] != nil
}

// expecting reports whether a write of the operator to key is recent
// enough (lagExpiry) that an object the cache does not hold is still on its
// way (a Deployment the operator just claimed), or on its way out (one it
// just released).
func (l *cacheLag) expecting(key types.NamespacedName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.seen[key]
	return rec != nil && time.Since(rec.since) < lagExpiry
}

// forget drops the record of key.
func (l *cacheLag) forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, key)
}

// lagWrites follows the writes of one pass to one object, in order, and
// records them in a cacheLag when the pass is done with the object.
type lagWrites struct {
	lag  *cacheLag
	key  types.NamespacedName
	uid  types.UID
	last struct {
		rv  string
		gen int64
	}
	older []string
}

// track starts following writes to the object that the pass read at
// version rv and generation gen.
func (l *cacheLag) track(key types.NamespacedName, uid types.UID, rv string, gen int64) *lagWrites {
	w := &lagWrites{lag: l, key: key, uid: uid}
	w.last.rv, w.last.gen = rv, gen
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

// conflicted records that a write conditional on the last known version
// met a newer one: the cache shows at best that older version, and the pass
// decides again once it shows the newer one.
func (w *lagWrites) conflicted() {
	w.older = append(w.older, w.last.rv)
}

// done records what the pass's writes moved the object on from.
func (w *lagWrites) done() {
	if len(w.older) > 0 {
		w.lag.wrote(w.key, w.uid, w.last.gen, w.older...)
	}
}
