package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// TestTargetClaimRace: two OpenMedModels created at once for one unclaimed
// Deployment, 20 times. Exactly one owns it every time; the other reports
// TargetConflict and its pointer is not on the Deployment. The loser's
// conditional claim meets a 409: that is somebody else writing first, not a
// failure, so no pass reports ApplyFailed, warns or counts an error.
func TestTargetClaimRace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	defer func() {
		// A claim that met the other model's claim was answered 409: the
		// race is exercised when some were (20 of 20 in the runs measured;
		// TestFirstPassOnALaggingCacheIsNotAFailure forces one).
		conflicts := op.writes.answered(http.MethodPatch, "/namespaces/"+ns+"/deployments/", http.StatusConflict)
		if conflicts == 0 {
			t.Errorf("no claim was answered 409 in 20 races: the race was not exercised")
		}
		t.Logf("claims answered 409: %d in 20 races", conflicts)
		op.stop() // drains the events the passes queued
		if n := op.metric(t, controllers.MetricReconcileErrors, map[string]string{"reason": v1alpha1.ApplyFailedReason}); n != 0 {
			t.Errorf("%s{reason=ApplyFailed} = %v after the races, want 0", controllers.MetricReconcileErrors, n)
		}
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Reason == v1alpha1.ApplyFailedReason {
				t.Errorf("%s: ApplyFailed event %q", e.InvolvedObject.Name, e.Message)
			}
		}
	}()
	for i := 0; i < 20; i++ {
		dep := fmt.Sprintf("race-%02d", i)
		createDeployment(t, chartDeployment(ns, dep, 2))
		owners := watchOwners(t, ns, dep)
		a, b := newModel(ns, dep+"-a", "OpenMed/a"), newModel(ns, dep+"-b", "OpenMed/b")
		a.Spec.TargetRef.Name, b.Spec.TargetRef.Name = dep, dep
		var wg sync.WaitGroup
		for _, m := range []*v1alpha1.OpenMedModel{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := env.Client.Create(ctx, m); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()

		var winner, loser string
		eventually(t, "one owner for "+dep, func() (bool, string) {
			owner := getDeployment(t, ns, dep).Annotations[v1alpha1.ModelResourceAnnotation]
			ma, mb := getModel(t, ns, a.Name), getModel(t, ns, b.Name)
			ra, rb := condition(ma, v1alpha1.ReadyCondition), condition(mb, v1alpha1.ReadyCondition)
			conflict := func(c *metav1.Condition) bool { return c != nil && c.Reason == v1alpha1.TargetConflictReason }
			switch {
			case owner == ns+"/"+a.Name && conflict(rb) && !conflict(ra):
				winner, loser = a.Name, b.Name
				return true, ""
			case owner == ns+"/"+b.Name && conflict(ra) && !conflict(rb):
				winner, loser = b.Name, a.Name
				return true, ""
			}
			return false, fmt.Sprintf("owner=%q a=%v b=%v", owner, ra, rb)
		})
		// The claim never changed hands: the first owner stayed the owner.
		if seen := owners(); len(seen) != 1 || seen[0] != ns+"/"+winner {
			t.Errorf("race %d: owner annotation took the values %v, want only %s", i, seen, winner)
		}
		// The Deployment carries the winner's pointer, never the loser's.
		d := getDeployment(t, ns, dep)
		cm := pointerConfigMap(t, d)
		if cm.Annotations[v1alpha1.ModelResourceAnnotation] != ns+"/"+winner {
			t.Errorf("race %d: pointer belongs to %s, winner %s loser %s", i, cm.Annotations[v1alpha1.ModelResourceAnnotation], winner, loser)
		}
	}
}

// watchOwners records every value the Deployment's owner annotation takes
// from now on; the returned function stops the watch and lists them.
func watchOwners(t *testing.T, ns, name string) func() []string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.AppsV1().Deployments(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok {
				continue
			}
			if v := d.Annotations[v1alpha1.ModelResourceAnnotation]; v != "" {
				mu.Lock()
				if len(seen) == 0 || seen[len(seen)-1] != v {
					seen = append(seen, v)
				}
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		time.Sleep(200 * time.Millisecond) // let the last events arrive
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}
