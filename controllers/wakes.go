package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/openmed/openmed-operator/controllers/internal/store"
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

// The kinds of object whose watch events wake a model: the label source of
// openmed_wakes_total.
const (
	wakeModel      = "model"
	wakeDeployment = store.WokeByDeployment
	wakeConfigMap  = store.WokeByConfigMap
	wakeBakePod    = store.WokeByBakePod
	wakePendingPod = store.WokeByPendingPod
)

var wakeSources = []string{wakeModel, wakeDeployment, wakeConfigMap, wakeBakePod, wakePendingPod}

// wakeCounter counts a store's watch events that woke a model
// (openmed_wakes_total by source); the zero value counts nothing.
type wakeCounter struct {
	metrics *Metrics
	source  string
}

func (w wakeCounter) woke() {
	if w.metrics != nil {
		w.metrics.countWake(w.source)
	}
}

// podWatchers say which models the bake pod store wakes: every model but
// those whose last pass decided that it judges no bake
// (rollout.Plan.WatchesPods false). A model is watched again from the
// start of each pass, which reads the store, until the pass decided, so no
// change between its read and its decision is lost; a model no pass has
// decided about since the process started (a new leader's backlog) is
// watched too. The store keeps every pod's change whoever it wakes: a
// model's next pass, woken by its Deployment when the rollout completes,
// reads the pods as they are. controller-runtime runs one pass of a model
// at a time.
type podWatchers struct{ mem *memory }

// watch makes the pod store wake key: a pass of key begins.
func (w podWatchers) watch(key types.NamespacedName) {
	w.mem.read(key, func(m *modelRecord) { m.podsUnwatched = false })
}

// unwatch stops it: the pass decided that it judges no bake.
func (w podWatchers) unwatch(key types.NamespacedName) {
	w.mem.update(key, func(m *modelRecord) { m.podsUnwatched = true })
}

// watched reports whether the pod store wakes key. It makes no record:
// the store asks for every pod's owner annotation.
func (w podWatchers) watched(key types.NamespacedName) bool {
	unwatched := false
	w.mem.read(key, func(m *modelRecord) { unwatched = m.podsUnwatched })
	return !unwatched
}

// countedPredicate is p, counting the events it lets through.
func countedPredicate(w wakeCounter, p predicate.Predicate) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return w.counted(p.Create(e)) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return w.counted(p.Update(e)) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return w.counted(p.Delete(e)) },
		GenericFunc: func(e event.GenericEvent) bool { return w.counted(p.Generic(e)) },
	}
}

func (w wakeCounter) counted(ok bool) bool {
	if ok {
		w.woke()
	}
	return ok
}

// wokenBy are the values of openmed_passes_total's woken_by.
var wokenBy = []string{wokeEvent, wokeBackstop, wokeTimer, wokeFollowUp, wokeCacheLag, wokeRetry, wokeUnclaimed}

// wakes remembers, for each model with a timer pending, when the timer its
// last pass asked for fires and what it is for, so the next pass knows
// whether that timer or a watch event woke it. controller-runtime's queue
// holds one entry per model: a watch event makes a waiting model ready at
// once, and its pass takes the entry, timer included, so a pass that starts
// before its timer's time was woken by an event.
type wakes struct{ mem *memory }

type wake struct {
	at    time.Time
	cause string
}

// woken returns what woke the pass of key that starts at now, and forgets
// the timer.
func (w wakes) woken(key types.NamespacedName, now time.Time) string {
	cause := wokeEvent
	w.mem.read(key, func(m *modelRecord) {
		if m.wake != nil && !now.Before(m.wake.at) {
			cause = m.wake.cause
		}
		m.wake = nil
	})
	return cause
}

// scheduled records the timer a pass of key that ended at now asked for
// (none: nothing is kept). An error or Requeue is retried with the
// controller's backoff, at a time the queue decides: any later pass counts
// as the retry.
func (w wakes) scheduled(key types.NamespacedName, now time.Time, res ctrl.Result, err error, cause string) {
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
	w.mem.update(key, func(m *modelRecord) { m.wake = &x })
}
