package controllers

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TestWakesTellTheTimerFromAnEvent: a pass that starts at or after the time
// of the timer its predecessor asked for was woken by that timer, one that
// starts earlier by a watch event (the queue's entry, timer included, went
// to it); a failed pass's retry is any later pass.
func TestWakesTellTheTimerFromAnEvent(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "m"}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		res    ctrl.Result
		err    error
		cause  string
		starts time.Duration
		want   string
	}{
		{"the first pass", ctrl.Result{}, nil, "", -1, wokeEvent},
		{"nothing asked for", ctrl.Result{}, nil, "", time.Hour, wokeEvent},
		{"the backstop fired", ctrl.Result{RequeueAfter: 15 * time.Second}, nil, wokeBackstop, 15 * time.Second, wokeBackstop},
		{"an event came first", ctrl.Result{RequeueAfter: 15 * time.Second}, nil, wokeBackstop, 3 * time.Second, wokeEvent},
		{"a judgment's timer", ctrl.Result{RequeueAfter: time.Minute}, nil, wokeTimer, time.Minute + time.Millisecond, wokeTimer},
		{"a timer without a cause", ctrl.Result{RequeueAfter: time.Second}, nil, "", time.Second, wokeTimer},
		{"an error", ctrl.Result{}, errors.New("x"), "", 5 * time.Millisecond, wokeRetry},
		{"a conflict", ctrl.Result{Requeue: true}, nil, "", 0, wokeRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := wakes{newMemory()}
			if tc.starts >= 0 {
				w.scheduled(key, t0, tc.res, tc.err, tc.cause)
			}
			if got := w.woken(key, t0.Add(max(tc.starts, 0))); got != tc.want {
				t.Errorf("woken by %q, want %q", got, tc.want)
			}
			if got := w.woken(key, t0.Add(2*time.Hour)); got != wokeEvent {
				t.Errorf("the next pass woken by %q: the timer was kept", got)
			}
			if rec := w.mem.models[key]; rec != nil && rec.wake != nil {
				t.Errorf("timer kept: %+v", *rec.wake)
			}
		})
	}
	var none wakes // a reconciler that was not set up
	none.scheduled(key, t0, ctrl.Result{RequeueAfter: time.Second}, nil, wokeTimer)
	if got := none.woken(key, t0); got != wokeEvent {
		t.Errorf("nil wakes: %q", got)
	}
}
