// Package modelserver plays the OpenMed service inside the pods of a local
// cluster (pkg/minicluster), over real HTTP on each pod's IP.
//
// kwok runs no container, but it gives every pod a loopback IP of its
// cluster's own range (minicluster.Cluster.PodCIDR), and Linux routes all of
// 127.0.0.0/8 to the loopback interface. A Fleet watches the pods a test
// selects and, for each whose model container runs, listens on the pod's IP
// and port and answers as the service does: what dials the pod, the
// operator as a kubelet probe would, reaches it with no test seam in its
// network path. The server stops when the pod goes, its IP changes or its
// container stops running.
//
// The e2e tests and `make run` (cmd/openmed-demo, whose forgets-names stage
// serves a version that answers without the patient's name) use it. How a
// pod answers is a Behaviour, asked of a callback at each request, so a
// test can change a version's answers halfway through a bake. Every
// request a pod received is recorded (Requests).
//
// kwok marks a pod Ready without asking anything, and a Fleet starts a pod's
// server once its watch sees the pod running, a few milliseconds after kwok
// wrote it: a client that dials a pod in between is refused, as by a
// container still starting, and must retry as a probe does. kwok may give a
// deleted pod's IP to a later pod; the Fleet sees the deletion first and
// stops the old server before it starts the new one. A pod whose address
// is taken (something else listens there) is tried again every second. A
// hostNetwork pod has the node's IP, which is not a loopback one: it cannot
// be served, and Close says so.
package modelserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// DefaultPort is the port of the OpenMed Helm chart's container.
const DefaultPort = 8080

// retryPeriod is how often a pod whose server could not start is tried
// again.
const retryPeriod = time.Second

// Options says which pods a Fleet serves and how.
type Options struct {
	// Namespace holds the pods; empty means every namespace.
	Namespace string

	// Selector selects the pods; nil selects every pod of Namespace.
	Selector labels.Selector

	// Port is where each server listens on its pod's IP. Defaults to
	// DefaultPort. Nothing on the machine may listen on it on every
	// address (0.0.0.0), or Linux refuses to bind it on a pod's IP (the
	// Fleet tries again every second).
	Port int

	// Container is the model container: a pod is served while it is
	// running. Defaults to v1alpha1.DefaultContainerName, the chart's.
	Container string

	// Behaviour says how a pod answers POST /pii/extract. It is called at
	// each request with the latest state of the pod the Fleet has seen,
	// a copy it may keep. Nil means Correct for every pod.
	Behaviour func(pod *corev1.Pod) Behaviour
}

// Request is one request a pod's server received.
type Request struct {
	// Pod is the pod's name.
	Pod string
	// Addr is the address it was sent to, the pod's IP and Port.
	Addr netip.AddrPort
	// Time is when it arrived.
	Time time.Time
	// Method and Path are the request line's method and path.
	Method, Path string
	// Host is the Host header, which net/http keeps out of Header.
	Host string
	// Header is the request's header, with the names in canonical form
	// (http.Header.Get finds them).
	Header http.Header
	// Body is the request's body, up to 1 MiB.
	Body []byte
	// Status is the HTTP status of the answer, 0 while or when none was
	// given (Hang).
	Status int
}

// Fleet serves the selected pods, one HTTP server per pod. Close it when
// done.
type Fleet struct {
	opts   Options
	client *http.Client

	cancel context.CancelFunc
	// watchDone is closed once the watch has stopped: no event is
	// handled after it.
	watchDone chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// servers holds the running servers by pod UID: a pod recreated
	// with the same name is another pod.
	servers  map[types.UID]*podServer
	requests map[string][]*Request
	// errs records, once per pod and address, why a pod could not be
	// served, until a later try serves it there; Close returns them.
	errs map[string]error
}

// Start watches the pods opts selects in the cluster cfg reaches and
// returns once the servers of the pods that exist have started; ctx bounds
// that wait. The Fleet then runs until Close.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Fleet, error) {
	if opts.Selector == nil {
		opts.Selector = labels.Everything()
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.Port < 1 || opts.Port > 65535 {
		return nil, fmt.Errorf("port %d is out of range", opts.Port)
	}
	if opts.Container == "" {
		opts.Container = v1alpha1.DefaultContainerName
	}
	if opts.Behaviour == nil {
		opts.Behaviour = func(*corev1.Pod) Behaviour { return Correct }
	}
	// A client of its own, so Close can drop its idle connections.
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, client)
	if err != nil {
		return nil, err
	}
	pods := cs.CoreV1().Pods(opts.Namespace)
	selector := opts.Selector.String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	f := &Fleet{
		opts:      opts,
		client:    client,
		watchDone: make(chan struct{}),
		servers:   map[types.UID]*podServer{},
		requests:  map[string][]*Request{},
		errs:      map[string]error{},
	}
	// A plain informer calls the handler on the goroutine that runs it,
	// one event at a time and in the order of the watch: a pod's server
	// is stopped before a later pod that kwok gave its IP to is served.
	// The resync hands every pod to sync again each retryPeriod, so a
	// server that could not listen (its address still taken) is tried
	// again.
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		ResyncPeriod:  retryPeriod,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { f.sync(obj) },
			UpdateFunc: func(_, obj any) { f.sync(obj) },
			DeleteFunc: f.forget,
		},
	})
	runCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.watchDone)
		informer.RunWithContext(runCtx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, errors.Join(fmt.Errorf("list the pods to serve: %w", context.Cause(ctx)), f.Close())
	}
	return f, nil
}

// Serving returns the address of each pod served now, by pod name.
func (f *Fleet) Serving() map[string]netip.AddrPort {
	f.mu.Lock()
	defer f.mu.Unlock()
	serving := make(map[string]netip.AddrPort, len(f.servers))
	for _, s := range f.servers {
		serving[s.name] = s.addr
	}
	return serving
}

// Requests returns the requests the pod named pod received, oldest first,
// over all the servers it had.
func (f *Fleet) Requests(pod string) []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	reqs := make([]Request, 0, len(f.requests[pod]))
	for _, r := range f.requests[pod] {
		c := *r
		c.Header, c.Body = r.Header.Clone(), slices.Clone(r.Body)
		reqs = append(reqs, c)
	}
	return reqs
}

// Close stops the watch and every server and returns once their
// goroutines, listeners and connections have ended; it drops the idle
// connections of its client of the API server too. A request that hangs
// ends without an answer. The error tells which pods could not be served,
// if any, and why.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.cancel()
		<-f.watchDone
		f.mu.Lock()
		servers := slices.Collect(maps.Values(f.servers))
		clear(f.servers)
		f.mu.Unlock()
		for _, s := range servers {
			s.stop()
		}
		f.client.CloseIdleConnections()
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(slices.Collect(maps.Values(f.errs))...)
}

// sync starts, keeps, moves or stops the server of one pod after an event.
func (f *Fleet) sync(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	addr, serve := f.address(pod)
	f.mu.Lock()
	s := f.servers[pod.UID]
	if s != nil && serve && s.addr == addr {
		s.setPod(pod)
		f.mu.Unlock()
		return
	}
	delete(f.servers, pod.UID)
	f.mu.Unlock()
	if s != nil {
		s.stop()
	}
	if !serve {
		return
	}
	s, err := f.serve(pod, addr)
	key := pod.Name + " " + addr.String()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.errs[key] == nil {
			f.errs[key] = fmt.Errorf("serve pod %s/%s on %s: %w", pod.Namespace, pod.Name, addr, err)
		}
		return
	}
	delete(f.errs, key)
	f.servers[pod.UID] = s
}

// forget stops the server of a pod that was deleted.
func (f *Fleet) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	f.mu.Lock()
	s := f.servers[pod.UID]
	delete(f.servers, pod.UID)
	f.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// address is where the pod is served, and whether it is: while it has an
// IP, is not being deleted (its containers were sent SIGTERM) and its model
// container runs.
func (f *Fleet) address(pod *corev1.Pod) (netip.AddrPort, bool) {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return netip.AddrPort{}, false
	}
	running := slices.ContainsFunc(pod.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool {
		return s.Name == f.opts.Container && s.State.Running != nil
	})
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if !running || err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, uint16(f.opts.Port)), true
}

// serve starts the server of pod on addr.
func (f *Fleet) serve(pod *corev1.Pod, addr netip.AddrPort) (*podServer, error) {
	l, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, err
	}
	s := &podServer{
		fleet:   f,
		name:    pod.Name,
		addr:    addr,
		closing: make(chan struct{}),
		served:  make(chan struct{}),
	}
	s.setPod(pod)
	s.srv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

// record adds a request of a pod and returns it, for its status to be set.
func (f *Fleet) record(r *Request) *Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[r.Pod] = append(f.requests[r.Pod], r)
	return r
}

// setStatus sets the status of a recorded request.
func (f *Fleet) setStatus(r *Request, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.Status = status
}
