package controllers

import (
	"math/rand/v2"
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

// backoff counts the consecutive failed passes of each model, in the
// part of the model's record slot picks.
type backoff struct {
	mem  *memory
	slot func(*modelRecord) **backoffItem
	base time.Duration
	max  time.Duration
}

type backoffItem struct {
	failures int
	// version identifies the generation and annotations the failures were
	// seen with.
	version string
}

func newBackoff(mem *memory, slot func(*modelRecord) **backoffItem, base, max time.Duration) *backoff {
	if base <= 0 {
		base = RetryBaseDelay
	}
	if max <= 0 {
		max = RetryMaxDelay
	}
	return &backoff{mem: mem, slot: slot, base: base, max: max}
}

// next records a failure of key at version and returns the delay before the
// next pass.
func (b *backoff) next(key types.NamespacedName, version string) time.Duration {
	var d time.Duration
	b.mem.update(key, func(m *modelRecord) {
		item := b.slot(m)
		if *item == nil || (*item).version != version {
			*item = &backoffItem{version: version}
		}
		d = b.base << min((*item).failures, 16)
		if d > b.max || d <= 0 {
			d = b.max
		}
		(*item).failures++
	})
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// reset forgets the failures of key after a pass that succeeded.
func (b *backoff) reset(key types.NamespacedName) {
	b.mem.read(key, func(m *modelRecord) { *b.slot(m) = nil })
}
