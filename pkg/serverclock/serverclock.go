// Package serverclock reads the API server's clock from the Date header of
// its answers, so the operator can compare its own times (the start of a
// bake, of a retry) with the times the cluster writes: a pod's
// creationTimestamp and a managedFields time (the API server's clock), a
// container's finishedAt (the kubelet's) and a Deployment condition's
// transition (kube-controller-manager's). An operator whose node clock is a
// minute off would otherwise judge a restart from before a bake as one
// during it, or the other way round.
//
// Every answer of the API server carries a Date header with its time to the
// second. Each answer bounds the offset between the two clocks: the server
// wrote the header at a moment in [Date, Date+1s) while the local clock
// read between the request's send and the answer's receipt. The clock keeps
// the intersection of those bounds, so it converges to within a few
// milliseconds of the true offset; when a bound falls outside (a clock
// stepped), it starts again from that answer.
package serverclock

import (
	"net/http"
	"sync"
	"time"
)

// Clock is the API server's clock as answers show it. The zero value is the
// local clock until an answer was seen. It is safe for concurrent use.
type Clock struct {
	// Local returns the local time; nil is time.Now.
	Local func() time.Time

	mu     sync.Mutex
	seen   bool
	lo, hi time.Duration // bounds of server minus local time
}

// Now is the local time corrected by the estimated offset of the API
// server's clock.
func (c *Clock) Now() time.Time {
	return c.local().Add(c.Offset())
}

// Offset is the estimated offset of the API server's clock from the local
// one (server minus local), zero until an answer was seen.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen {
		return 0
	}
	return c.lo + (c.hi-c.lo)/2
}

// Observe records an answer whose Date header read date, for a request
// sent at sent and answered at received (local times).
func (c *Clock) Observe(date, sent, received time.Time) {
	lo := date.Sub(received)
	hi := date.Add(time.Second).Sub(sent)
	if hi < lo {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen && lo <= c.hi && hi >= c.lo {
		c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
		return
	}
	c.lo, c.hi, c.seen = lo, hi, true
}

// Wrap returns a RoundTripper that observes the Date header of every answer
// rt receives; use it as rest.Config.WrapTransport (rest.Config.Wrap).
func (c *Clock) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{clock: c, next: rt}
}

func (c *Clock) local() time.Time {
	if c.Local != nil {
		return c.Local()
	}
	return time.Now()
}

type roundTripper struct {
	clock *Clock
	next  http.RoundTripper
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := t.clock.local()
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	received := t.clock.local()
	if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
		t.clock.Observe(date, sent, received)
	}
	return resp, nil
}
