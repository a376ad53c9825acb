package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/leaderelection"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/cmd/openmed-operator/app"
	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// shippedArgs are the operator flags of the bundle's Deployment, minus the
// listen addresses the harness chooses.
func shippedArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
			t.Fatal(err)
		}
		var args []string
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			if !strings.HasPrefix(a, "--metrics-addr=") && !strings.HasPrefix(a, "--health-addr=") {
				args = append(args, a)
			}
		}
		return args
	}
	t.Fatal("the bundle has no Deployment")
	return nil
}

// TestInstalledServiceAccount installs each overlay, then runs the operator
// with the shipped flags as the bundle's ServiceAccount (every request
// impersonates it, so the API server's RBAC decides): a rollout and a
// deletion complete, the metrics endpoint serves controller-runtime,
// openmed_* and (with --gotk-metrics) gotk_* metrics, and SIGTERM shuts the
// process down cleanly. The
// namespaced install leaves a model in another namespace alone.
func TestInstalledServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		overlay, namespace string
		clusterWide        bool
	}{
		{kustomize.DefaultOverlay, "openmed-system", true},
		{kustomize.NamespacedOverlay, "openmed-models", false},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			ctx := context.Background()
			objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), tc.overlay))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kustomize.Apply(ctx, env.Client, objs); err != nil {
				t.Fatal(err)
			}
			target := tc.namespace
			if tc.clusterWide {
				target = newNamespace(t, "team")
			}
			var outside string
			if !tc.clusterWide {
				outside = newNamespace(t, "outside")
				createTarget(t, outside, "svc")
				createModel(t, outside, "svc", nil)
			}

			kc := serviceAccountKubeconfig(t, tc.namespace, "openmed-operator")
			// The kubeconfig really acts as the ServiceAccount: it may not
			// read Secrets, which the admin identity behind it could.
			restCfg, err := clientcmd.BuildConfigFromFlags("", kc)
			if err != nil {
				t.Fatal(err)
			}
			sa, err := client.New(restCfg, client.Options{Scheme: env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			if err := sa.List(ctx, &corev1.SecretList{}, client.InNamespace(target)); !apierrors.IsForbidden(err) {
				t.Fatalf("listing Secrets as the ServiceAccount: err = %v, want Forbidden", err)
			}

			p := startOperator(t, tc.overlay, kc, tc.namespace, append(shippedArgs(t, objs), "--gotk-metrics")...)
			rollOut(t, target, "svc")

			// The pass records its metrics after the status write that
			// waitPhase saw, so the scrape waits for them.
			wants := []struct {
				name      string
				fragments []string
			}{
				{"controller_runtime_reconcile_total", []string{`controller="openmedmodel"`, `result="success"`}},
				{"gotk_reconcile_condition", []string{`kind="OpenMedModel"`, `name="svc"`, `type="Ready"`, `status="True"`}},
				{"controller_runtime_reconcile_time_seconds_count", []string{`controller="openmedmodel"`}},
				{"openmed_model_info", []string{`name="svc"`, `namespace="` + target + `"`, `phase="Ready"`}},
			}
			var samples []sample
			var missing []string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				samples, missing = p.scrape(t), nil
				for _, want := range wants {
					if v, ok := sum(samples, want.name, want.fragments...); !ok || v <= 0 {
						missing = append(missing, fmt.Sprintf("metric %s{%s} = %v (found %v), want > 0", want.name, strings.Join(want.fragments, ","), v, ok))
					}
				}
				if len(missing) == 0 || time.Now().After(deadline) {
					break
				}
			}
			for _, m := range missing {
				t.Error(m)
			}

			// Reconcile time is one histogram per controller, not one per
			// model: a scrape stays small as the models grow.
			if _, ok := sum(samples, "gotk_reconcile_duration_seconds_count"); ok {
				t.Error("a per-model reconcile duration histogram is exposed")
			}

			deleteModel(t, target, "svc")
			if hasPointer(t, target, "svc") {
				t.Error("deletion did not release the model pointer")
			}
			if outside != "" {
				m := getModel(t, outside, "svc")
				if len(m.Finalizers) > 0 || m.Status.ObservedGeneration != -1 || hasPointer(t, outside, "svc") {
					t.Errorf("the namespaced operator touched a model outside its namespace: finalizers %v, observedGeneration %d",
						m.Finalizers, m.Status.ObservedGeneration)
				}
			}
			p.terminate(t)
		})
	}
}

// TestLeaderElectionFailover runs two replicas against one API server: only
// the leader writes; when it stops the other takes the Lease and finishes
// the rollout the first one started. A graceful SIGTERM releases the Lease
// (a watch sees the empty holder written before the follower's); after a
// SIGKILL nothing releases it, and the follower takes it only once it
// expired: its acquireTime is no earlier than the dead leader's last
// renewTime plus the lease duration. The Lease's own record decides, not
// how long the takeover took on this machine.
func TestLeaderElectionFailover(t *testing.T) {
	const (
		lease = 4 * time.Second
		retry = 500 * time.Millisecond
	)
	for _, tc := range []struct {
		name     string
		stop     func(*operatorProcess, *testing.T)
		releases bool
	}{
		{"sigterm", (*operatorProcess).terminate, true},
		{"sigkill", (*operatorProcess).kill, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t, "le")
			args := []string{
				"--enable-leader-election",
				"--leader-election-lease-duration=" + lease.String(),
				"--leader-election-renew-deadline=3s",
				"--leader-election-retry-period=" + retry.String(),
				"--requeue-interval=1s",
			}
			kc := kubeconfig(t, "")
			a := startOperator(t, "replica-a", kc, ns, args...)
			b := startOperator(t, "replica-b", kc, ns, args...)

			var leader, follower *operatorProcess
			eventually(t, "one leader", func() (bool, string) {
				la, lb := a.isLeader(t, app.LeaderElectionID), b.isLeader(t, app.LeaderElectionID)
				switch {
				case la && !lb:
					leader, follower = a, b
				case lb && !la:
					leader, follower = b, a
				}
				return leader != nil, "no single leader"
			})
			holder := leaseHolder(t, ns, app.LeaderElectionID)
			// The scrapes above had each process review the scraper's
			// token (a TokenReview and a SubjectAccessReview, both POSTs,
			// remembered for a minute): the writes are counted from here.
			followerBefore, leaderBefore := follower.writes(t), leader.writes(t)

			createTarget(t, ns, "svc")
			createModel(t, ns, "svc", nil)
			waitPhase(t, ns, "svc", v1alpha1.PhaseRollingOut)
			if n := follower.writes(t) - followerBefore; n != 0 {
				t.Errorf("the follower sent %v write requests, want 0", n)
			}
			if n := leader.writes(t) - leaderBefore; n == 0 {
				t.Error("the leader sent no write requests")
			}

			records := watchLease(t, ns, app.LeaderElectionID)
			tc.stop(leader, t)
			stopped := time.Now()
			eventually(t, "takeover", func() (bool, string) {
				return follower.isLeader(t, app.LeaderElectionID), "follower not leading"
			})
			t.Logf("takeover after %s took %s", tc.name, time.Since(stopped).Round(time.Millisecond))
			checkTakeover(t, records(), holder, tc.releases)

			writesBefore := follower.writes(t)
			completeRollout(t, ns, "svc")
			waitPhase(t, ns, "svc", v1alpha1.PhaseReady)
			if follower.writes(t) <= writesBefore {
				t.Error("the new leader did not write the finished rollout")
			}
			follower.terminate(t)
		})
	}
}

// watchLease watches the Lease from its current resourceVersion; the
// function it returns stops the watch and gives every record written since,
// in the order the API server wrote them.
func watchLease(t *testing.T, ns, name string) func() []coordinationv1.LeaseSpec {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var current coordinationv1.Lease
	if err := wc.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &current); err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &coordinationv1.LeaseList{}, client.InNamespace(ns),
		client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: current.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	records := []coordinationv1.LeaseSpec{current.Spec}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Modified {
				mu.Lock()
				records = append(records, l.Spec)
				mu.Unlock()
			}
		}
	}()
	return func() []coordinationv1.LeaseSpec {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return records
	}
}

// checkTakeover checks the Lease records from the old holder's to the
// first of another: a release (an empty holder) between them when the old
// leader stopped gracefully; otherwise none, and an acquireTime no earlier
// than the old holder's last renewTime plus its lease duration.
func checkTakeover(t *testing.T, records []coordinationv1.LeaseSpec, old string, releases bool) {
	t.Helper()
	var last *coordinationv1.LeaseSpec
	released := false
	for i := range records {
		r := &records[i]
		switch h := ptr.Deref(r.HolderIdentity, ""); h {
		case old:
			last = r
		case "":
			released = true
		default:
			if last == nil {
				t.Fatalf("the Lease went to %s with no record of %s before it", h, old)
			}
			if released != releases {
				t.Errorf("the Lease was released before %s took it: %v, want %v", h, released, releases)
			}
			if !releases {
				expiry := last.RenewTime.Add(time.Duration(ptr.Deref(last.LeaseDurationSeconds, 0)) * time.Second)
				if r.AcquireTime == nil || r.AcquireTime.Time.Before(expiry) {
					t.Errorf("%s acquired the Lease at %v, before %s's expired at %s", h, r.AcquireTime, old, expiry)
				}
			}
			return
		}
	}
	t.Fatalf("no record of another holder after %s: %d records", old, len(records))
}

func leaseHolder(t *testing.T, ns, name string) string {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// TestShards runs two processes with different --watch-label-selector
// values: each leads its own Lease at the same time and reconciles only the
// OpenMedModels of its shard; an unlabelled model is left to neither.
func TestShards(t *testing.T) {
	ns := newNamespace(t, "shard")
	kc := kubeconfig(t, "")
	const key = "sharding.fluxcd.io/key"
	shards := map[string]*operatorProcess{}
	for _, shard := range []string{"shard1", "shard2"} {
		shards[shard] = startOperator(t, shard, kc, ns, "--enable-leader-election", "--watch-label-selector="+key+"="+shard)
		createTarget(t, ns, "m-"+shard)
		createModel(t, ns, "m-"+shard, map[string]string{key: shard})
	}
	createTarget(t, ns, "m-none")
	createModel(t, ns, "m-none", nil)

	for shard, p := range shards {
		waitPhase(t, ns, "m-"+shard, v1alpha1.PhaseRollingOut)
		id := leaderelection.GenerateID(app.LeaderElectionID, key+"="+shard)
		if id == app.LeaderElectionID {
			t.Fatalf("shard %s shares the unsharded Lease", shard)
		}
		eventually(t, shard+" leading "+id, func() (bool, string) { return p.isLeader(t, id), "not leading" })
	}
	for shard, p := range shards {
		// The pass records the metric after the status write waitPhase saw.
		eventually(t, shard+" exporting m-"+shard, func() (bool, string) {
			_, found := sum(p.scrape(t), "openmed_model_info", `name="m-`+shard+`"`)
			return found, "not exported yet"
		})
		samples := p.scrape(t)
		for _, model := range []string{"m-shard1", "m-shard2", "m-none"} {
			_, found := sum(samples, "openmed_model_info", `name="`+model+`"`)
			if want := model == "m-"+shard; found != want {
				t.Errorf("%s reconciled %s: %v, want %v", shard, model, found, want)
			}
		}
	}
	if m := getModel(t, ns, "m-none"); len(m.Finalizers) > 0 || m.Status.ObservedGeneration != -1 {
		t.Errorf("an unlabelled model was reconciled: finalizers %v, observedGeneration %d", m.Finalizers, m.Status.ObservedGeneration)
	}
	for _, p := range shards {
		p.terminate(t)
	}
}
