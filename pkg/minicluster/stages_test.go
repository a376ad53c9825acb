package minicluster

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// stage is the part of a kwok Stage the tests look at.
type stage struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			Kind string `json:"kind"`
		} `json:"resourceRef"`
		Selector struct {
			MatchExpressions []expression `json:"matchExpressions"`
		} `json:"selector"`
		Delay struct {
			DurationMilliseconds int64 `json:"durationMilliseconds"`
		} `json:"delay"`
		Next map[string]any `json:"next"`
	} `json:"spec"`
}

type expression struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

func TestRenderStages(t *testing.T) {
	for _, tc := range []struct {
		sel     NeverReady
		crash   CrashAfterReady
		fixture string
	}{
		{sel: NeverReady{Annotation: "example.com/stall"}, crash: CrashAfterReady{Annotation: "example.com/crash", After: 5 * time.Second, Reason: "Error"},
			fixture: "selectors-exists.yaml"},
		{sel: NeverReady{Annotation: "openmed.ai/model-manifest-hash", Values: []string{"bad", `it's "quoted"`}},
			crash:   CrashAfterReady{Annotation: "openmed.ai/model-manifest-hash", Values: []string{"crashes"}, After: 1500 * time.Millisecond, Reason: "OOMKilled"},
			fixture: "selectors-in.yaml"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			out, err := renderStages(tc.sel, tc.crash)
			if err != nil {
				t.Fatal(err)
			}
			var stages []stage
			for _, doc := range strings.Split(string(out), "\n---\n") {
				var s stage
				if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
					t.Fatalf("stage does not parse: %v\n%s", err, doc)
				}
				if s.Kind != "Stage" || len(s.Spec.Next) == 0 {
					t.Errorf("document is not a Stage with a next step: %+v", s)
				}
				stages = append(stages, s)
			}

			var names []string
			pods := map[string][]expression{}
			for _, s := range stages {
				names = append(names, s.Metadata.Name)
				if s.Spec.ResourceRef.Kind == "Pod" {
					pods[s.Metadata.Name] = s.Spec.Selector.MatchExpressions
				}
				if s.Metadata.Name == "pod-crash-after-ready" {
					if got, want := s.Spec.Delay.DurationMilliseconds, tc.crash.After.Milliseconds(); got != want {
						t.Errorf("crash delay %d ms, want %d", got, want)
					}
					tmpl, _ := s.Spec.Next["statusTemplate"].(string)
					if !strings.Contains(tmpl, "reason: "+tc.crash.Reason+"\n") {
						t.Errorf("crash template does not terminate with %s:\n%s", tc.crash.Reason, tmpl)
					}
				}
			}
			wantNames := []string{"node-initialize", "node-heartbeat", "pod-ready", "pod-readiness-gates", "pod-running-not-ready", "pod-crash-after-ready",
				"pod-restart-container", "pod-evicted-by-kubelet", "pod-delete"}
			if !slices.Equal(names, wantNames) {
				t.Errorf("stages %v, want %v", names, wantNames)
			}

			raw, err := os.ReadFile(filepath.Join("testdata", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			var want map[string][]expression
			if err := yaml.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pods, want) {
				t.Errorf("pod stage selectors\n got: %+v\nwant: %+v", pods, want)
			}
		})
	}
}
