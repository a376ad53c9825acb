package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// cacheLag remembers, per object, the resourceVersions a pass saw or
// produced before its last write: a cache that still shows one of them has
// not caught up with the operator's own write. A pass that meets such an
// object waits for the watch event that brings the write instead of
// deciding again on old state (which would repeat the write) or reading the
// object from the API server (one more request per change).
//
// The record is exact: the write that produced the newer version was
// conditional on (or answered with) the versions listed, so the cache can
// only show one of them or something newer.
type cacheLag struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]map[string]bool
}

func newCacheLag() *cacheLag {
	return &cacheLag{seen: map[types.NamespacedName]map[string]bool{}}
}

// wrote records that key moved on from the versions in old.
func (l *cacheLag) wrote(key types.NamespacedName, old ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.seen[key]
	if set == nil {
		set = map[string]bool{}
		l.seen[key] = set
	}
	for _, rv := range old {
		if rv != "" {
			set[rv] = true
		}
	}
}

// behind reports whether the cached version rv of key predates the
// operator's last write; a version it does not know means the cache caught
// up, and the record is dropped.
func (l *cacheLag) behind(key types.NamespacedName, rv string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.seen[key]
	if set == nil {
		return false
	}
	if set[rv] {
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

// forget drops the record of key.
func (l *cacheLag) forget(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, key)
}
