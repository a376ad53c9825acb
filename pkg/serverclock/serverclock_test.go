package serverclock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/serverclock"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Environment) { env = e })
	os.Exit(0)
}

// TestObserve: the bounds of each answer narrow the offset; one outside
// them (a stepped clock) starts again.
func TestObserve(t *testing.T) {
	local := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	type answer struct {
		date           time.Time
		sent, received time.Duration // after local
	}
	for _, tc := range []struct {
		name    string
		answers []answer
		lo, hi  time.Duration // where the offset must be
	}{
		{"no answer: the local clock", nil, 0, 0},
		{"a server 90 s ahead, answered in 20 ms", []answer{{local.Add(90 * time.Second), 0, 20 * time.Millisecond}},
			90*time.Second - 20*time.Millisecond, 91 * time.Second},
		{"two answers half a second apart narrow it to their intersection", []answer{
			{local.Add(-30 * time.Second), 0, 10 * time.Millisecond},
			{local.Add(-30 * time.Second), 600 * time.Millisecond, 610 * time.Millisecond},
		}, -30*time.Second - 10*time.Millisecond, -30*time.Second + 400*time.Millisecond},
		{"a stepped clock starts again", []answer{
			{local, 0, 10 * time.Millisecond},
			{local.Add(time.Hour + 5*time.Second), 5 * time.Second, 5*time.Second + 10*time.Millisecond},
		}, time.Hour - 10*time.Millisecond, time.Hour + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &serverclock.Clock{}
			for _, a := range tc.answers {
				c.Observe(a.date, local.Add(a.sent), local.Add(a.received))
			}
			if got := c.Offset(); got < tc.lo || got > tc.hi {
				t.Errorf("offset %v, want within [%v, %v]", got, tc.lo, tc.hi)
			}
		})
	}
}

// TestWrapReadsTheDateHeader: a client whose transport the clock wraps
// learns the offset of a server whose clock is 90 s ahead.
func TestWrapReadsTheDateHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
	}))
	defer srv.Close()
	c := &serverclock.Clock{}
	hc := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for range 3 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if off := c.Offset(); off < 89*time.Second || off > 91*time.Second {
		t.Errorf("offset %v, want 90s ± 1s", off)
	}
	if d := c.Now().Sub(time.Now()); d < 89*time.Second || d > 91*time.Second {
		t.Errorf("Now is %v from the local clock, want 90s ± 1s", d)
	}
}

// TestReadsTheRealAPIServer: the real kube-apiserver's answers carry the
// Date header the clock reads; on this machine both clocks are the same,
// so the offset is under a second.
func TestReadsTheRealAPIServer(t *testing.T) {
	c := &serverclock.Clock{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(c.Wrap)
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Offset()
	for range 5 {
		if err := cl.List(context.Background(), &corev1.NamespaceList{}); err != nil {
			t.Fatal(err)
		}
	}
	c.Local = func() time.Time { return time.Now().Add(-time.Hour) } // the operator's node is an hour behind
	if err := cl.List(context.Background(), &corev1.NamespaceList{}); err != nil {
		t.Fatal(err)
	}
	if before != 0 {
		t.Errorf("an offset %v before any answer", before)
	}
	if d := c.Now().Sub(time.Now()); d < -time.Second || d > time.Second {
		t.Errorf("with the local clock an hour behind, Now is %v from the API server's", d)
	}
}
