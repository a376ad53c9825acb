package minicluster_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// A command-line tool starts a cluster, prints where its kubeconfig is and
// keeps it running until Ctrl-C. Cancelling the context covers Ctrl-C during
// Start; StopOnSignal covers it afterwards.
func ExampleStart() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	c, err := minicluster.Start(ctx, minicluster.Config{DataDir: "data"})
	if err != nil {
		log.Fatal(err)
	}
	cancel()
	c.StopOnSignal()
	fmt.Println("export KUBECONFIG=" + c.KubeconfigPath())
	select {}
}

// Tests usually start a throw-away cluster and talk to it with client-go or
// controller-runtime through RESTConfig.
func ExampleCluster_RESTConfig() {
	c, err := minicluster.Start(context.Background(), minicluster.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			log.Print(err)
		}
	}()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		log.Print(err)
		return
	}
	node, err := cs.CoreV1().Nodes().Get(context.Background(), minicluster.NodeName, metav1.GetOptions{})
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println(node.Name, node.Status.NodeInfo.KubeletVersion)
}

// A test that plays the kubelet itself gives its pods IPs from a range no
// cluster on the machine uses while it holds it, and serves them on those
// IPs (Linux routes all of 127.0.0.0/8 to lo).
func ExampleReservePodRange() {
	prefix, lock, err := minicluster.ReservePodRange()
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Close()
	first := prefix.Addr().Next()
	fmt.Println(prefix.Bits(), prefix.Contains(first), first.IsLoopback())
	// Output: 16 true true
}
