package modelserver_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun/modelserver"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// A test serves the pods of the chart's Deployment; the pods of one model
// version, told apart by the manifest hash the operator puts on them, answer
// without names.
func ExampleStart() {
	ctx := context.Background()
	cluster, err := minicluster.Start(ctx, minicluster.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cluster.Stop() }()

	const brokenManifest = "7d3f9a12" // the manifest hash of the version under test
	fleet, err := modelserver.Start(ctx, cluster.RESTConfig(), modelserver.Options{
		Namespace: "openmed",
		Selector:  labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "openmed-service"}),
		Behaviour: func(pod *corev1.Pod) modelserver.Behaviour {
			if pod.Annotations[v1alpha1.ManifestHashAnnotation] == brokenManifest {
				return modelserver.OmitName
			}
			return modelserver.Correct
		},
	})
	if err != nil {
		log.Print(err)
		return
	}
	defer func() {
		if err := fleet.Close(); err != nil {
			log.Print(err)
		}
	}()
	for pod, addr := range fleet.Serving() {
		fmt.Println(pod, "answers on", addr, "with", len(fleet.Requests(pod)), "requests so far")
	}
}
