// Command library shows how a platform team embeds the OpenMedModel decision
// core: it reads an OpenMedModel and its target Deployment from YAML files,
// runs one pass of rollout.Decide and prints the plan, with no cluster.
//
//	go run . -model ../openmedmodel.yaml -deployment deployment.yaml
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

func main() {
	modelPath := flag.String("model", "", "OpenMedModel YAML file")
	deploymentPath := flag.String("deployment", "", "target Deployment YAML file (omit: not found)")
	flag.Parse()
	if err := run(*modelPath, *deploymentPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(modelPath, deploymentPath string) error {
	obj := &v1alpha1.OpenMedModel{}
	if err := readYAML(modelPath, obj); err != nil {
		return err
	}
	// The API server fills in CRD defaults; a file read from Git has none.
	obj.Default()
	observed := rollout.Observed{Now: metav1.NewTime(time.Now())}
	if deploymentPath != "" {
		dep := &appsv1.Deployment{}
		if err := readYAML(deploymentPath, dep); err != nil {
			return err
		}
		observed.Deployment = dep
	}
	plan := rollout.Decide(obj, observed, rollout.Options{})

	fmt.Printf("phase: %s\n", plan.Status.Phase)
	for _, c := range plan.Status.Conditions {
		fmt.Printf("condition: %s=%s (%s) %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, cm := range plan.EnsureConfigMaps {
		fmt.Printf("ensure ConfigMap: %s\n", cm.Name)
	}
	if plan.ApplyDeployment != nil {
		intent, err := json.MarshalIndent(plan.ApplyDeployment.Object, "", "  ")
		if err != nil {
			return fmt.Errorf("encode the Deployment intent: %w", err)
		}
		fmt.Printf("apply Deployment (claim=%v):\n%s\n", plan.Claim, intent)
	}
	for _, e := range plan.Events {
		fmt.Printf("event: %s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
