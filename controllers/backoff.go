package controllers

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Retry delays after a failed pass: exponential from RetryBaseDelay, capped
// at RetryMaxDelay, with up to 20% jitter so models that failed together do
// not retry together. A model whose generation or annotations changed since
// its last failure starts again from the base: a new spec is acted on at once.
const (
	RetryBaseDelay = 250 * time.Millisecond
	RetryMaxDelay  = 10 * time.Second
)

// backoff counts the consecutive failed passes of each resource.
type backoff struct {
	mu    sync.Mutex
	items map[types.NamespacedName]backoffItem
	base  time.Duration
	max   time.Duration
}

type backoffItem struct {
	failures int
	// version identifies the generation and annotations the failures were
	// seen with.
	version string
}

func newBackoff(base, max time.Duration) *backoff {
	if base <= 0 {
		base = RetryBaseDelay
	}
	if max <= 0 {
		max = RetryMaxDelay
	}
	return &backoff{items: map[types.NamespacedName]backoffItem{}, base: base, max: max}
}

// next records a failure of key at version and returns the delay before the
// next pass.
func (b *backoff) next(key types.NamespacedName, version string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	item := b.items[key]
	if item.version != version {
		item = backoffItem{version: version}
	}
	d := b.base << min(item.failures, 16)
	if d > b.max || d <= 0 {
		d = b.max
	}
	item.failures++
	b.items[key] = item
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// forget resets key after a pass that succeeded or a resource that is gone.
func (b *backoff) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.items, key)
}
