package store

import (
	"slices"
	"sync"
)

// ownerMap holds a store's kept objects by their owner, as the store's
// event handler saw them: the handler puts an object before it wakes the
// owner, so the pass it wakes finds it. It replaces a client-go index,
// whose set per owner costs about 0.3 KiB (a map of its own); this costs
// the owner's entry and a slice of pointers. K is the owner's key, V a
// pointer to a kept object.
type ownerMap[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K][]V
}

func newOwnerMap[K comparable, V any]() *ownerMap[K, V] {
	return &ownerMap[K, V]{m: map[K][]V{}}
}

// put keeps v under owner, in place of the object same matches.
func (o *ownerMap[K, V]) put(owner K, v V, same func(V) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	objs := o.m[owner]
	for i := range objs {
		if same(objs[i]) {
			// A new slice: a reader may hold the old one.
			objs = slices.Clone(objs)
			objs[i] = v
			o.m[owner] = objs
			return
		}
	}
	// Readers hold the old length: what append writes past it is theirs
	// to ignore.
	o.m[owner] = append(objs, v)
}

// remove drops the object same matches from owner's.
func (o *ownerMap[K, V]) remove(owner K, same func(V) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	objs := o.m[owner]
	for i := range objs {
		if same(objs[i]) {
			if len(objs) == 1 {
				delete(o.m, owner)
				return
			}
			// A new slice: a reader may hold the old one.
			rest := make([]V, 0, len(objs)-1)
			o.m[owner] = append(append(rest, objs[:i]...), objs[i+1:]...)
			return
		}
	}
}

// get returns owner's objects; the slice is only read.
func (o *ownerMap[K, V]) get(owner K) []V {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.m[owner]
}
