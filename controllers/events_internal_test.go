package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestEventRecorderAfterShutdown: an event recorded after the recorder's
// Start returned (a pass that finishes while the manager stops) is counted
// as dropped, cause shutdown, not left in a queue nobody reads.
func TestEventRecorderAfterShutdown(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	rec := NewEventRecorder(nil, testScheme(t), ControllerName, metrics, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	model := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "openmed-service", UID: "u-1"}}
	rec.Eventf(model, corev1.EventTypeNormal, v1alpha1.RolloutSucceededReason, "late")
	if n := testutil.ToFloat64(metrics.eventsDropped.WithLabelValues(dropShutdown)); n != 1 {
		t.Errorf("%s{cause=%q} = %v, want 1", MetricEventsDropped, dropShutdown, n)
	}
	if len(rec.queue) != 0 {
		t.Errorf("%d events left in the queue", len(rec.queue))
	}
}

// testScheme knows the built-in types and OpenMedModel.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// TestEventName: an event's name is the object's name and the time in
// nanoseconds as hex, as client-go's recorder names it, cut to a DNS
// subdomain of at most 253 characters for the longest object names.
func TestEventName(t *testing.T) {
	at := time.Unix(1_765_000_000, 123)
	for _, tc := range []struct {
		object, want string
	}{
		{object: "openmed-service", want: "openmed-service.187e8a260c90807b"},
		{object: strings.Repeat("a", 236), want: strings.Repeat("a", 236) + ".187e8a260c90807b"},
		{object: strings.Repeat("a", 253), want: strings.Repeat("a", 236) + ".187e8a260c90807b"},
		// The cut would end a label in a dash or a dot: both go.
		{object: strings.Repeat("a", 234) + "-.b" + strings.Repeat("c", 20), want: strings.Repeat("a", 234) + ".187e8a260c90807b"},
	} {
		got := eventName(tc.object, at)
		if got != tc.want {
			t.Errorf("eventName(%d characters) = %q, want %q", len(tc.object), got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("eventName(%d characters) = %q is no DNS subdomain: %v", len(tc.object), got, errs)
		}
	}
}
