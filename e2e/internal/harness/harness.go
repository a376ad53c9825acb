// Package harness is what the scale benchmark and the fault suite share: a
// real kube-apiserver and etcd with an audit log of the operator's own
// requests, a stand-in for the Deployment controller, and readings of the
// operator process (CPU, memory).
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// OperatorUser is the user the operator process authenticates as; the audit
// log records its requests only.
const OperatorUser = "openmed-operator"

// LockdownUser is the user the operator process authenticates as in a
// cluster of StartLockdown: the ServiceAccount of the install bundle, with
// no rights but the lockdown overlay's.
const LockdownUser = "system:serviceaccount:openmed-system:openmed-operator"

// Cluster is a kube-apiserver and etcd with the CRDs installed and an audit
// log of the operator's requests.
type Cluster struct {
	// User is the user the operator authenticates as (OperatorUser, or
	// LockdownUser); the audit log records its requests only.
	User string
	// OperatorArgs are flags the operator must run with in this cluster
	// (the lockdown overlay's --default-service-account).
	OperatorArgs []string
	Env          *testenv.Environment
	// Client is an administrator's client, outside the audit log.
	Client client.WithWatch
	// AuditLog is the audit log file.
	AuditLog string
	// Kubeconfig authenticates as OperatorUser (system:masters).
	Kubeconfig string
	// KubeconfigData is the same, in memory.
	KubeconfigData []byte

	// users are the users whose requests the audit log records: User and
	// the shard users (ShardKubeconfig).
	users []string
}

// maxShards is how many operator processes besides the first a cluster can
// tell apart in its audit log (ShardKubeconfig).
const maxShards = 8

// ShardUser is the user the i-th further operator process (a shard)
// authenticates as.
func ShardUser(user string, i int) string { return fmt.Sprintf("%s-shard-%d", user, i) }

// ShardKubeconfig writes a kubeconfig for the i-th further operator process
// (1 ≤ i ≤ 8), authenticated as ShardUser with the same rights as User, so
// the audit log tells its requests from the others'. Not in the lockdown.
func (c *Cluster) ShardKubeconfig(t *testing.T, i int) string {
	t.Helper()
	if i < 1 || i > maxShards || c.Lockdown() {
		t.Fatalf("shard %d: want 1..%d, and not in the lockdown", i, maxShards)
	}
	data, err := c.Env.AddUser(ShardUser(c.User, i), "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSuffix(c.Kubeconfig, ".kubeconfig") + fmt.Sprintf("-shard-%d.kubeconfig", i)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Start starts the cluster in dir; level is the audit level of the
// operator's requests ("Metadata" or "RequestResponse"). Stop it with
// Cluster.Stop.
func Start(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	return start(t, dir, level, OperatorUser, "system:masters")
}

// StartLockdown is Start for an operator installed by the lockdown overlay
// (kustomize/lockdown): the bundle is applied, the operator authenticates
// as the bundle's ServiceAccount (LockdownUser) and holds exactly the
// overlay's rights, so every write it makes to a Deployment or a ConfigMap
// must be made as a ServiceAccount of the object's namespace. Run the
// operator with OperatorArgs.
func StartLockdown(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	c := start(t, dir, level, LockdownUser, "system:serviceaccounts", "system:serviceaccounts:openmed-system")
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), kustomize.LockdownOverlay))
	if err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if _, err := kustomize.Apply(context.Background(), c.Client, objs); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if strings.HasPrefix(a, "--default-service-account") {
				c.OperatorArgs = append(c.OperatorArgs, a)
			}
		}
	}
	if len(c.OperatorArgs) == 0 {
		c.Stop(t)
		t.Fatal("the lockdown overlay's operator has no --default-service-account")
	}
	return c
}

// LockdownEnv, set to anything, makes the scale benchmark and the fault
// suite run the operator as the lockdown overlay installs it (StartFor).
const LockdownEnv = "OPENMED_LOCKDOWN"

// StartFor is StartLockdown when $OPENMED_LOCKDOWN is set, else Start.
func StartFor(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	if os.Getenv(LockdownEnv) != "" {
		return StartLockdown(t, dir, level)
	}
	return Start(t, dir, level)
}

// Lockdown reports whether the operator runs with the lockdown overlay's
// rights.
func (c *Cluster) Lockdown() bool { return c.User == LockdownUser }

// LeaseNamespace is where the operator may hold its Lease: the bundle's
// namespace in the lockdown (its Role is there), else "default".
func (c *Cluster) LeaseNamespace() string {
	if c.Lockdown() {
		return "openmed-system"
	}
	return "default"
}

// TenantServiceAccount is the ServiceAccount of examples/tenancy.
const TenantServiceAccount = "openmed-deployer"

// Tenant makes ns a tenant namespace in a lockdown cluster: it creates the
// objects of examples/tenancy/tenant-role.yaml and
// examples/tenancy/impersonator-binding.yaml there (the namespace replaced,
// nothing else) and returns the ServiceAccount the models of ns name.
// Outside the lockdown it does nothing and returns "".
func (c *Cluster) Tenant(t *testing.T, ns string) string {
	t.Helper()
	if !c.Lockdown() {
		return ""
	}
	ApplyTenantRole(t, c.Client, ns)
	ApplyImpersonatorBinding(t, c.Client, ns)
	return TenantServiceAccount
}

// ApplyTenantRole creates examples/tenancy/tenant-role.yaml in ns, the
// namespace replaced (localrun.TenantRole).
func ApplyTenantRole(t *testing.T, c client.Client, ns string) {
	t.Helper()
	objs, err := localrun.TenantRole(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// ApplyImpersonatorBinding creates examples/tenancy/impersonator-binding.yaml
// in ns, the namespace replaced (localrun.ImpersonatorBinding): the operator
// may then impersonate the ServiceAccounts of ns.
func ApplyImpersonatorBinding(t *testing.T, c client.Client, ns string) {
	t.Helper()
	objs, err := localrun.ImpersonatorBinding(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func start(t *testing.T, dir, level, user string, groups ...string) *Cluster {
	t.Helper()
	c := &Cluster{User: user, AuditLog: filepath.Join(dir, "audit.log"), Kubeconfig: filepath.Join(dir, "operator.kubeconfig")}
	policy := filepath.Join(dir, "audit-policy.yaml")
	users := []string{user}
	for i := 1; i <= maxShards; i++ {
		users = append(users, ShardUser(user, i))
	}
	c.users = users
	body := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n" +
		"- level: " + level + "\n  users: [\"" + strings.Join(users, `", "`) + "\"]\n- level: None\n"
	if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.StartWith(testenv.Options{APIServerFlags: map[string]string{
		"audit-log-path": c.AuditLog, "audit-policy-file": policy, "audit-log-maxsize": "0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Env = env
	if c.KubeconfigData, err = env.AddUser(user, groups...); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Kubeconfig, c.KubeconfigData, 0o600); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if c.Client, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	return c
}

// Stop stops the API server and etcd.
func (c *Cluster) Stop(t *testing.T) {
	if err := c.Env.Stop(); err != nil {
		t.Error(err)
	}
}

// Request is one request of the operator in the audit log.
type Request struct {
	// User is the operator process's user (User, or a ShardUser).
	User                                         string
	Verb, Resource, Subresource, Namespace, Name string
	// URI is the request's path and query.
	URI  string
	Code int
	At   time.Time
	// ImpersonatedUser is the user the request was made as, when the
	// operator impersonated one (a model's ServiceAccount).
	ImpersonatedUser string
	// Response is the object the API server answered with, at audit level
	// RequestResponse.
	Response json.RawMessage
}

// Kind is "verb resource[/subresource]".
func (r Request) Kind() string {
	k := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		k += "/" + r.Subresource
	}
	return k
}

// modelRead reports a list one model's pass makes: the pods of a version,
// by their pod template hash.
func (r Request) modelRead() bool {
	u, err := url.Parse(r.URI)
	return err == nil && r.Resource == "pods" && strings.Contains(u.Query().Get("labelSelector"), appsv1.DefaultDeploymentUniqueLabelKey)
}

// Mutating reports a write.
func (r Request) Mutating() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Requests reads the operator's requests received in [from, to): each
// request once, a watch when it started (its ResponseComplete comes only
// when it ends, minutes later), every other request when it completed.
// The TokenReviews and SubjectAccessReviews with which the metrics
// endpoint checks a scrape are left out: the benchmark's scrapes cause
// them, not the models.
func (c *Cluster) Requests(t *testing.T, from, to time.Time) []Request {
	t.Helper()
	f, err := os.Open(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Request
	started := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e struct {
			AuditID string `json:"auditID"`
			Stage   string `json:"stage"`
			Verb    string `json:"verb"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
			ImpersonatedUser *struct {
				Username string `json:"username"`
			} `json:"impersonatedUser"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestURI      string           `json:"requestURI"`
			ResponseObject  json.RawMessage  `json:"responseObject"`
			RequestReceived metav1.MicroTime `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if !slices.Contains(c.users, e.User.Username) || e.ObjectRef == nil || scrapeReview[e.ObjectRef.Resource] {
			continue
		}
		// A watch counts at ResponseStarted, which the API server logs for
		// every long-running response, refused ones included; a watch
		// without it (it failed before the response began) counts at
		// ResponseComplete. Every other request counts at ResponseComplete.
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
			started[e.AuditID] = true
		case e.Stage != "ResponseComplete" || started[e.AuditID]:
			continue
		}
		at := e.RequestReceived.Time
		if at.Before(from) || !at.Before(to) {
			continue
		}
		r := Request{User: e.User.Username, Verb: e.Verb, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name, URI: e.RequestURI, At: at, Response: e.ResponseObject}
		if e.ResponseStatus != nil {
			r.Code = e.ResponseStatus.Code
		}
		if e.ImpersonatedUser != nil {
			r.ImpersonatedUser = e.ImpersonatedUser.Username
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrapeReview are the resources of the reviews the metrics endpoint asks
// the API server for.
var scrapeReview = map[string]bool{"tokenreviews": true, "subjectaccessreviews": true}

// PerModel splits requests into the ones a model's passes make and the ones
// the informers and the leader election make (list, watch, leases), each
// counted by kind. A list of one version's pods (by their pod template
// hash: the read of the pass that ends a bake) is a model's.
func PerModel(reqs []Request) (models, informer map[string]int) {
	models, informer = map[string]int{}, map[string]int{}
	for _, r := range reqs {
		if (r.Verb == "list" && !r.modelRead()) || r.Verb == "watch" || r.Resource == "leases" {
			informer[r.Kind()]++
			continue
		}
		models[r.Kind()]++
	}
	return models, informer
}

// StandIn plays the Deployment controller in one namespace: every
// generation it has not reported yet is reported after Delay, rolled out
// and available, or, for a pod template whose manifest hash is in Failing,
// as a rollout that exceeded its progress deadline while the old pods
// serve. It remembers when it reported each generation.
type StandIn struct {
	// Delay is the longest wait before a report (uniform from 0); 0 reports
	// at once.
	Delay time.Duration

	c      client.WithWatch
	ns     string
	w      watch.Interface
	queues []chan *appsv1.Deployment
	wg     sync.WaitGroup

	mu       sync.Mutex
	failing  map[string]bool
	crashing map[string]bool
	pods     bool
	reported map[string]map[int64]time.Time
	rnd      *rand.Rand
}

// deploymentLabel marks the stand-in's pods with their Deployment.
const deploymentLabel = "harness.openmed.ai/deployment"

// NewStandIn starts the stand-in for namespace ns with workers writers.
func NewStandIn(t *testing.T, c client.WithWatch, ns string, workers int, delay time.Duration) *StandIn {
	t.Helper()
	w, err := c.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	s := &StandIn{Delay: delay, c: c, ns: ns, w: w, failing: map[string]bool{}, crashing: map[string]bool{}, reported: map[string]map[int64]time.Time{},
		rnd: rand.New(rand.NewPCG(1, 2))}
	for i := 0; i < workers; i++ {
		q := make(chan *appsv1.Deployment, 4096)
		s.queues = append(s.queues, q)
		s.wg.Add(1)
		go s.work(q)
	}
	go func() {
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Deleted && d.Generation > d.Status.ObservedGeneration {
				s.queues[int(hash(d.Name))%len(s.queues)] <- d
			}
		}
		for _, q := range s.queues {
			close(q)
		}
	}()
	return s
}

// Fail makes every template with this manifest hash fail its rollout.
func (s *StandIn) Fail(manifestHash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[manifestHash] = true
}

// WithPods makes the stand-in play the ReplicaSet controller and the kubelet
// too: before it reports a rollout available it creates the replicas' pods
// of the new template (its labels and annotations), Running and Ready, and
// deletes the pods of the Deployment's other templates.
func (s *StandIn) WithPods() *StandIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = true
	return s
}

// Crash makes a container of a pod of every template with this manifest
// hash restart once, up to a second after the stand-in reported the
// rollout (needs WithPods).
func (s *StandIn) Crash(manifestHash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashing[manifestHash] = true
}

func hash(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func (s *StandIn) work(q chan *appsv1.Deployment) {
	defer s.wg.Done()
	for d := range q {
		if s.Delay > 0 {
			s.mu.Lock()
			wait := time.Duration(s.rnd.Int64N(int64(s.Delay)))
			s.mu.Unlock()
			time.Sleep(wait)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live := &appsv1.Deployment{}
			if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(d), live); err != nil {
				return client.IgnoreNotFound(err)
			}
			if live.Status.ObservedGeneration >= live.Generation {
				return nil
			}
			h := live.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
			s.mu.Lock()
			failing, pods, crash := s.failing[h], s.pods, s.crashing[h]
			s.mu.Unlock()
			if pods && !failing {
				names, err := s.ensurePods(live)
				if err != nil {
					return err
				}
				if crash && len(names) > 0 {
					s.mu.Lock()
					wait := time.Duration(s.rnd.Int64N(int64(time.Second)))
					s.mu.Unlock()
					s.wg.Add(1)
					go s.crash(names[0], wait)
				}
			}
			live.Status = Status(live, failing)
			if err := s.c.Status().Update(context.Background(), live); err != nil {
				return err
			}
			s.mu.Lock()
			if s.reported[live.Name] == nil {
				s.reported[live.Name] = map[int64]time.Time{}
			}
			s.reported[live.Name][live.Generation] = time.Now()
			s.mu.Unlock()
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "stand-in:", err)
		}
	}
}

// ensurePods creates the pods of d's template that do not exist, Ready, and
// deletes the Deployment's pods of other templates; it returns the names of
// the template's pods.
func (s *StandIn) ensurePods(d *appsv1.Deployment) ([]string, error) {
	ctx := context.Background()
	h := d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{deploymentLabel: d.Name}); err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[v1alpha1.ManifestHashAnnotation] == h {
			have[p.Name] = true
			continue
		}
		if err := s.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
	}
	short := strings.TrimPrefix(h, "sha256:")
	short = short[:min(10, len(short))]
	if short == "" {
		// A template the operator has not pointed yet: one hash of its
		// own, so the ReplicaSet's name ends in a letter or digit.
		short = "unpointed"
	}
	owner, err := s.ensureReplicaSet(d, short)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := 0; i < int(ptr.Deref(d.Spec.Replicas, 1)); i++ {
		name := fmt.Sprintf("%s-%s-%d", d.Name, short, i)
		names = append(names, name)
		if have[name] {
			continue
		}
		// As the template's ReplicaSet names and labels its pods: the
		// bake reads only the pods a ReplicaSet of the target controls.
		labels := map[string]string{deploymentLabel: d.Name, appsv1.DefaultDeploymentUniqueLabelKey: short}
		for k, v := range d.Spec.Template.Labels {
			labels[k] = v
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: labels, Annotations: d.Spec.Template.Annotations,
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: d.Spec.Template.Spec.Containers[0].Name, Image: d.Spec.Template.Spec.Containers[0].Image}}},
		}
		if err := s.c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		if err := s.setPodStatus(name, func(p *corev1.Pod) {
			now := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
		}); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// ensureReplicaSet creates, unless it exists, the ReplicaSet of d's
// template whose pod-template-hash is hash, as the Deployment controller
// does (named "<deployment>-<hash>", the template's labels and the hash,
// controlled by d), and returns the controller reference its pods carry:
// a pod counts for a model only through that chain of UIDs.
func (s *StandIn) ensureReplicaSet(d *appsv1.Deployment, hash string) (metav1.OwnerReference, error) {
	ctx := context.Background()
	labels := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		labels[k] = v
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + hash, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: d.Spec.Template.Spec}},
	}
	err := s.c.Create(ctx, rs)
	if apierrors.IsAlreadyExists(err) {
		err = s.c.Get(ctx, client.ObjectKeyFromObject(rs), rs)
	}
	if err != nil {
		return metav1.OwnerReference{}, err
	}
	return *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet")), nil
}

// crash reports, after wait, that the pod's container was OOM-killed and
// restarted.
func (s *StandIn) crash(name string, wait time.Duration) {
	defer s.wg.Done()
	time.Sleep(wait)
	err := s.setPodStatus(name, func(p *corev1.Pod) {
		if len(p.Status.ContainerStatuses) == 0 {
			return
		}
		now := metav1.Now()
		c := &p.Status.ContainerStatuses[0]
		c.RestartCount++
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", StartedAt: c.State.Running.StartedAt, FinishedAt: now}
		c.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
	})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintln(os.Stderr, "stand-in crash:", err)
	}
}

func (s *StandIn) setPodStatus(name string, mutate func(*corev1.Pod)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.Pod{}
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, p); err != nil {
			return err
		}
		mutate(p)
		return s.c.Status().Update(context.Background(), p)
	})
}

// Status is what the Deployment controller reports for d's current
// generation: rolled out and available, or failed.
func Status(d *appsv1.Deployment, failing bool) appsv1.DeploymentStatus {
	r := ptr.Deref(d.Spec.Replicas, 1)
	now := metav1.Now()
	if failing {
		return appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: r + 1, UpdatedReplicas: 1, ReadyReplicas: r, AvailableReplicas: r, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", LastUpdateTime: now, LastTransitionTime: now},
			},
		}
	}
	return appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: now, LastTransitionTime: now},
		},
	}
}

// Reported is how many Deployments have been reported at least once.
func (s *StandIn) Reported() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reported)
}

// LastReport is when the stand-in last reported a generation of name.
func (s *StandIn) LastReport(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	var gen int64
	for g, at := range s.reported[name] {
		if g > gen {
			gen, last = g, at
		}
	}
	return last
}

// Stop ends the stand-in and waits for its writers.
func (s *StandIn) Stop() {
	s.w.Stop()
	s.wg.Wait()
}

// CPUSeconds is the user and system CPU the process pid has used.
func CPUSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces; the fields after ") " are fixed.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// ControlPlaneCPU is the CPU time, in seconds, of the kube-apiserver and
// etcd processes this process started (its descendants of those names).
func ControlPlaneCPU(t *testing.T) float64 {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var sum float64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "kube-apiserver", "etcd":
		default:
			continue
		}
		if descendsFrom(pid, self) {
			sum += CPUSeconds(t, pid)
		}
	}
	return sum
}

// descendsFrom reports whether pid is a descendant of ancestor.
func descendsFrom(pid, ancestor int) bool {
	for i := 0; i < 32 && pid > 1; i++ {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		ppid, _ := strconv.Atoi(fields[1])
		if ppid == ancestor {
			return true
		}
		pid = ppid
	}
	return false
}

// PeakRSS is the process's high-water resident set size in bytes.
func PeakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// AnonSampler samples a process's anonymous resident memory (RssAnon: its
// heap, stacks and runtime data, not the pages of its binary, which every
// process of the same executable on a node shares in the page cache) and
// keeps the largest sample: the kernel keeps a high-water mark of the
// whole resident set only (VmHWM).
type AnonSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// SampleAnon samples pid's RssAnon every 200 ms until Stop.
func SampleAnon(pid int) *AnonSampler {
	s := &AnonSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, ok := StatusBytes(pid, "RssAnon:"); ok && v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Peak is the largest RssAnon sampled so far, in bytes.
func (s *AnonSampler) Peak() int64 { return s.peak.Load() }

// Stop ends the sampling (the process may be gone) and returns Peak.
func (s *AnonSampler) Stop() int64 {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	return s.Peak()
}

// StatusBytes reads a "Key:   N kB" line of /proc/pid/status in bytes.
func StatusBytes(pid int, key string) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key) {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

// SetAvailable reports the Deployment name's current generation available
// or not (its pods lost and back, no rollout) and returns when it wrote it.
func (s *StandIn) SetAvailable(t *testing.T, name string, available bool) time.Time {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, d); err != nil {
			return err
		}
		r := ptr.Deref(d.Spec.Replicas, 1)
		d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UnavailableReplicas = r, r, 0
		d.Status.Conditions[0].Status = corev1.ConditionTrue
		if !available {
			d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UnavailableReplicas = 0, 0, r
			d.Status.Conditions[0].Status = corev1.ConditionFalse
		}
		return s.c.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}
