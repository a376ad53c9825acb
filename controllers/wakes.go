package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// What woke a pass: the label woken_by of openmed_passes_total.
const (
	// wokeEvent: a watch event of the model or of what it owns (or the
	// model's first pass).
	wokeEvent = "event"
	// wokeBackstop: the backstop timer of a rollout in flight, which only
	// guards against a missed event (rollout.BackstopInterval).
	wokeBackstop = "backstop"
	// wokeTimer: the timer of a judgment: a retry's deadline, the end of
	// a bake, a grace, an ownership conflict's hour.
	wokeTimer = "timer"
	// wokeFollowUp: the pass after one that recorded a decision the next
	// pass acts on (a rollback), or a release that met a newer Deployment.
	wokeFollowUp = "follow-up"
	// wokeCacheLag: the recheck of a cache that had not shown the
	// operator's own last write yet.
	wokeCacheLag = "cache-lag"
	// wokeRetry: the backoff after a failed pass or a conflict.
	wokeRetry = "retry"
	// wokeUnclaimed: the recheck of a target outside the cache (missing,
	// without the container, ...), which no watch event announces.
	wokeUnclaimed = "unclaimed-target"
)

// wokenBy are the values of openmed_passes_total's woken_by.
var wokenBy = []string{wokeEvent, wokeBackstop, wokeTimer, wokeFollowUp, wokeCacheLag, wokeRetry, wokeUnclaimed}

// wakes remembers, for each model with a timer pending, when the timer its
// last pass asked for fires and what it is for, so the next pass knows
// whether that timer or a watch event woke it. controller-runtime's queue
// holds one entry per model: a watch event makes a waiting model ready at
// once, and its pass takes the entry, timer included, so a pass that starts
// before its timer's time was woken by an event.
type wakes struct {
	mu  sync.Mutex
	due map[types.NamespacedName]wake
}

type wake struct {
	at    time.Time
	cause string
}

func newWakes() *wakes {
	return &wakes{due: map[types.NamespacedName]wake{}}
}

// woken returns what woke the pass of key that starts at now, and forgets
// the timer.
func (w *wakes) woken(key types.NamespacedName, now time.Time) string {
	if w == nil {
		return wokeEvent
	}
	w.mu.Lock()
	x, ok := w.due[key]
	delete(w.due, key)
	w.mu.Unlock()
	if ok && !now.Before(x.at) {
		return x.cause
	}
	return wokeEvent
}

// scheduled records the timer a pass of key that ended at now asked for
// (none: nothing is kept). An error or Requeue is retried with the
// controller's backoff, at a time the queue decides: any later pass counts
// as the retry.
func (w *wakes) scheduled(key types.NamespacedName, now time.Time, res ctrl.Result, err error, cause string) {
	if w == nil {
		return
	}
	var x wake
	switch {
	case err != nil || res.Requeue: //nolint:staticcheck // retry() returns Requeue on a conflict
		x = wake{at: now, cause: wokeRetry}
	case res.RequeueAfter > 0:
		if cause == "" {
			cause = wokeTimer
		}
		x = wake{at: now.Add(res.RequeueAfter), cause: cause}
	default:
		return
	}
	w.mu.Lock()
	w.due[key] = x
	w.mu.Unlock()
}

// forget drops a deleted model's timer.
func (w *wakes) forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.due, key)
	w.mu.Unlock()
}
