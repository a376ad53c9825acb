package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// history keeps every OpenMedModel a watch event carried, per object.
type history struct {
	mu      sync.Mutex
	objects map[types.NamespacedName][]*unstructured.Unstructured
	w       watch.Interface
	done    chan struct{}
}

func watchModels(ctx context.Context, c client.WithWatch) (*history, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModelList"))
	w, err := c.Watch(ctx, list)
	if err != nil {
		return nil, err
	}
	h := &history{objects: map[types.NamespacedName][]*unstructured.Unstructured{}, w: w, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			k := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
			h.mu.Lock()
			h.objects[k] = append(h.objects[k], u)
			h.mu.Unlock()
		}
	}()
	return h, nil
}

func (h *history) stop() {
	h.w.Stop()
	<-h.done
}

// await returns the first object of k the watch saw in which pred holds,
// waiting for it if need be.
func (h *history) await(ctx context.Context, k types.NamespacedName, what string, pred func(*unstructured.Unstructured) bool) (*unstructured.Unstructured, error) {
	seen := 0
	for {
		h.mu.Lock()
		objs := h.objects[k]
		h.mu.Unlock()
		for ; seen < len(objs); seen++ {
			if pred(objs[seen]) {
				return objs[seen], nil
			}
		}
		select {
		case <-ctx.Done():
			last := "nothing"
			if len(objs) > 0 {
				last = summary(objs[len(objs)-1])
			}
			return nil, fmt.Errorf("waiting for %s: %s (last: %s): %w", k, what, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// latest is the newest object of k the watch saw.
func (h *history) latest(k types.NamespacedName) *unstructured.Unstructured {
	h.mu.Lock()
	defer h.mu.Unlock()
	objs := h.objects[k]
	return objs[len(objs)-1]
}
